package spark_mergetree.spark;

import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsDynamicOverwrite;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A table of {@link MergeTreeCatalog}: the Python source's own table (rows come from and go to the
 * Python reader and writer), with the options that name it (catalog root, db.table) added to every
 * scan and write, since Spark gives a catalog table's scans and writes only the query's options,
 * and with the table's structure and statistics as its properties (DESCRIBE TABLE EXTENDED).
 * {@link ScanPerRelation} prunes its scans as it prunes a path table's ({@link #withInner}).
 */
public final class MergeTreeSqlTable implements SupportsRead, SupportsWrite {
    private final Table inner;
    private final String name;
    private final Map<String, String> properties;
    private final Map<String, String> location;

    MergeTreeSqlTable(Table inner, String name, Map<String, String> properties, Map<String, String> location) {
        this.inner = inner;
        this.name = name;
        this.properties = properties;
        this.location = location;
    }

    /** The Python source's table this one reads through. */
    Table inner() {
        return inner;
    }

    /** The same table read through another of the Python source's tables (a pruned scan's). */
    MergeTreeSqlTable withInner(Table table) {
        return new MergeTreeSqlTable(table, name, properties, location);
    }

    Map<String, String> location() {
        return location;
    }

    @Override
    public String name() {
        return name;
    }

    @Override
    @SuppressWarnings("deprecation") // what PythonTable implements in every 4.x
    public StructType schema() {
        return inner.schema();
    }

    @Override
    public Transform[] partitioning() {
        return new Transform[0];
    }

    @Override
    public Map<String, String> properties() {
        return properties;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ, TableCapability.BATCH_WRITE, TableCapability.TRUNCATE,
                TableCapability.OVERWRITE_DYNAMIC);
    }

    CaseInsensitiveStringMap located(CaseInsensitiveStringMap options) {
        Map<String, String> merged = new HashMap<>(options.asCaseSensitiveMap());
        merged.putAll(location);
        return new CaseInsensitiveStringMap(merged);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        return ((SupportsRead) inner).newScanBuilder(located(options));
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
        return new Builder(info, false);
    }

    @Override
    public String toString() {
        return name;
    }

    /** A write of the Python source with the table's location in its options. */
    private final class Builder implements SupportsTruncate, SupportsDynamicOverwrite {
        private final LogicalWriteInfo info;
        private final boolean dynamic;

        Builder(LogicalWriteInfo info, boolean dynamic) {
            this.info = info;
            this.dynamic = dynamic;
        }

        private WriteBuilder innerBuilder() {
            CaseInsensitiveStringMap options = located(info.options());
            if (dynamic) {
                Map<String, String> merged = new HashMap<>(options.asCaseSensitiveMap());
                merged.put("partition_overwrite_mode", "dynamic");
                options = new CaseInsensitiveStringMap(merged);
            }
            CaseInsensitiveStringMap finalOptions = options;
            LogicalWriteInfo located = new LogicalWriteInfo() {
                @Override
                public CaseInsensitiveStringMap options() {
                    return finalOptions;
                }

                @Override
                public String queryId() {
                    return info.queryId();
                }

                @Override
                public StructType schema() {
                    return info.schema();
                }
            };
            return ((SupportsWrite) inner).newWriteBuilder(located);
        }

        @Override
        public Write build() {
            return innerBuilder().build();
        }

        @Override
        public WriteBuilder truncate() {
            WriteBuilder builder = innerBuilder();
            return builder instanceof SupportsTruncate truncating ? truncating.truncate() : builder;
        }

        @Override
        public WriteBuilder overwriteDynamicPartitions() {
            return new Builder(info, true).truncate();
        }
    }
}
