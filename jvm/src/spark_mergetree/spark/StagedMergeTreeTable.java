package spark_mergetree.spark;

import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.StagedTable;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The table of a {@code CREATE TABLE ... AS SELECT} or {@code saveAsTable} before it exists: the
 * query's write job creates it, as {@code option("catalog", root).save("db.table")} does, with the
 * table properties as write options ({@code order_by}, {@code setting.<name>}, ...) and the write's
 * own options (so {@code df.write.option("order_by", "id").saveAsTable(...)} shapes the table).
 * Everything was checked by {@link MergeTreeCatalog#stageCreate} before; an aborted job drops what
 * its write created.
 */
final class StagedMergeTreeTable implements StagedTable, SupportsWrite {
    private final MergeTreeCatalog catalog;
    private final Identifier ident;
    private final StructType schema;
    private final Map<String, String> options;

    StagedMergeTreeTable(MergeTreeCatalog catalog, Identifier ident, StructType schema, Map<String, String> options) {
        this.catalog = catalog;
        this.ident = ident;
        this.schema = schema;
        this.options = options;
    }

    @Override
    public String name() {
        return catalog.name() + "." + String.join(".", ident.namespace()) + "." + ident.name();
    }

    @Override
    @SuppressWarnings("deprecation")
    public StructType schema() {
        return schema;
    }

    @Override
    public Transform[] partitioning() {
        return new Transform[0];
    }

    @Override
    public Map<String, String> properties() {
        return options;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_WRITE);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
        Map<String, String> merged = new HashMap<>(options);
        merged.putAll(info.options().asCaseSensitiveMap());
        CaseInsensitiveStringMap located = new CaseInsensitiveStringMap(merged);
        Table python;
        try {
            python = ((TableProvider) MergeTreeCatalog.newProvider()).getTable(schema, new Transform[0], Map.of());
        } catch (ReflectiveOperationException unexpected) {
            throw new IllegalStateException("mergetree: the Python data source provider is missing: " + unexpected,
                    unexpected);
        }
        return ((SupportsWrite) python).newWriteBuilder(new LogicalWriteInfo() {
            @Override
            public CaseInsensitiveStringMap options() {
                return located;
            }

            @Override
            public String queryId() {
                return info.queryId();
            }

            @Override
            public StructType schema() {
                return info.schema();
            }
        });
    }

    @Override
    public void commitStagedChanges() {
        // The write job committed the table's rows (and created it); a job that wrote nothing
        // still ran the Python writer's setup on the driver, which created the table.
    }

    @Override
    public void abortStagedChanges() {
        catalog.dropTable(ident);
    }
}
