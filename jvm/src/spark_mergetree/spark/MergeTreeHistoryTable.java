package spark_mergetree.spark;

import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.LocalScan;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * {@code <catalog>.<db>.<table>.history}: one row per commit of the table, oldest first (version,
 * timestamp, operation, parts and rows added and removed), listed by Python
 * (spark_mergetree/spark/table_history.py) when the query is planned. A metadata table rather than
 * a statement: it is a relation, so it filters, joins and works the same under Spark Connect, and a
 * listed version is what {@code VERSION AS OF} reads. The rows are few (one per commit since the
 * log's last checkpoint), so they are a local scan.
 */
final class MergeTreeHistoryTable implements SupportsRead {
    static final String NAME = "history";
    static final StructType SCHEMA = new StructType()
            .add("version", DataTypes.LongType, false)
            .add("timestamp", DataTypes.TimestampType, true)
            .add("operation", DataTypes.StringType, false)
            .add("parts_added", DataTypes.IntegerType, false)
            .add("parts_removed", DataTypes.IntegerType, false)
            .add("rows_added", DataTypes.LongType, true)
            .add("rows_removed", DataTypes.LongType, true);

    private final MergeTreeCatalog catalog;
    private final String tableName;

    MergeTreeHistoryTable(MergeTreeCatalog catalog, Identifier table, String tableName) throws NoSuchTableException {
        this.catalog = catalog;
        this.tableName = tableName;
        if (!catalog.tableExists(table)) {
            throw new NoSuchTableException(table);
        }
    }

    @Override
    public String name() {
        return catalog.name() + "." + tableName + "." + NAME;
    }

    @Override
    @SuppressWarnings("deprecation") // the StructType form, what every 4.x reads
    public StructType schema() {
        return SCHEMA;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public Map<String, String> properties() {
        return Map.of();
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        return () -> new Listing(rows());
    }

    private InternalRow[] rows() {
        JsonNode commits;
        try {
            commits = catalog.call("history", tableName, null).result();
        } catch (RuntimeException error) {
            throw MergeTreeCatalog.userError(error);
        }
        List<InternalRow> rows = new ArrayList<>();
        for (JsonNode commit : commits) {
            rows.add(new GenericInternalRow(new Object[] {
                commit.get("version").asLong(),
                nullOrLong(commit.get("timestamp")),
                UTF8String.fromString(commit.get("operation").asText()),
                commit.get("parts_added").asInt(),
                commit.get("parts_removed").asInt(),
                nullOrLong(commit.get("rows_added")),
                nullOrLong(commit.get("rows_removed")),
            }));
        }
        return rows.toArray(new InternalRow[0]);
    }

    private static Object nullOrLong(JsonNode node) {
        return node == null || node.isNull() ? null : node.asLong();
    }

    @Override
    public String toString() {
        return name();
    }

    /** The listed commits, handed to Spark as they are. */
    private record Listing(InternalRow[] rows) implements LocalScan {
        @Override
        public StructType readSchema() {
            return SCHEMA;
        }

        @Override
        public String description() {
            return "mergetree history (" + rows.length + " commits)";
        }
    }
}
