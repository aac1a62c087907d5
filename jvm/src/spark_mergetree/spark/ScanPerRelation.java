package spark_mergetree.spark;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.expressions.AttributeSet$;
import org.apache.spark.sql.catalyst.expressions.MakeDecimal;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.MetadataBuilder;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Gives every scan of the Python data source {@code mergetree} a data source provider of its own,
 * reading only the columns the plan above it needs.
 *
 * <p>Each {@code DataSourceV2Relation} over the source is replaced by one built by a fresh
 * {@code PythonDataSourceV2} whose table schema holds the columns that the {@code Project} (and the
 * {@code Filter}s between it and the relation) reference; the attribute references are kept, so
 * nothing above changes. The Python reader is created with that narrower schema, and the planned
 * read PySpark 4.1–4.3 stores on the provider belongs to this scan alone, which makes pushed
 * filters safe. The fields of that schema carry the metadata key {@value #MARKER} (whether Spark
 * pushes filters to Python in this query), by which the reader knows. The new provider starts from
 * the Python data source the original one already created (when it did), which saves a Python
 * round trip per scan. Its scans report the size of the table's files (of the columns read), so
 * Spark broadcasts small mergetree tables in joins as it does small Parquet ones.
 *
 * <p>Decimal columns of precision 18 or less that no Filter of the chain uses are read as their
 * unscaled longs (field metadata {@value #UNSCALED}: "precision,scale"), which Spark takes from
 * Arrow at the cost of a long instead of building a Decimal per value, and a Project above the
 * scan makes them decimals again with Catalyst's MakeDecimal, under the columns' own expression
 * ids (so nothing above changes). {@value #FAST_TYPES_CONF} = false turns this off.
 *
 * <p>Spark's internal classes are matched by name and rebuilt by reflection ({@code makeCopy}
 * with the relation's own constructor arguments), so a Spark whose classes differ gets the plan
 * unchanged: correct, unpruned.
 */
public final class ScanPerRelation extends Rule<LogicalPlan> {
    /** Field metadata key of every schema this rule made: "pushdown" or "scan". */
    public static final String MARKER = "spark_mergetree.scan";
    static final String SOURCE_NAME = "mergetree";
    static final String RELATION = "org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation";
    static final String PYTHON_TABLE = "org.apache.spark.sql.execution.datasources.v2.python.PythonTable";
    static final String PYTHON_PROVIDER = "org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2";
    static final String PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled";
    /** Runtime switch: "false" leaves plans as Spark made them (one shared provider, no pruning). */
    static final String ENABLED_CONF = "spark.mergetree.extension.enabled";
    /** Field metadata key of a decimal column read as its unscaled longs: "precision,scale". */
    public static final String UNSCALED = "spark_mergetree.unscaled";
    /** Runtime switch: "false" reads decimals as decimals. */
    static final String FAST_TYPES_CONF = "spark.mergetree.extension.fastTypes";

    @Override
    public String ruleName() {
        return "spark_mergetree.ScanPerRelation";
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        if (!conf().getConfString(ENABLED_CONF, "true").trim().equalsIgnoreCase("true")) {
            return plan;
        }
        try {
            return rewrite(plan);
        } catch (ReflectiveOperationException | RuntimeException | LinkageError unexpected) {
            // Another Spark than the one this was written for: the plan stays as Spark made it.
            return plan;
        }
    }

    private LogicalPlan rewrite(LogicalPlan plan) throws ReflectiveOperationException {
        if (plan instanceof Project) {
            // Project over Filters over the relation: the columns the Project and the Filters use.
            List<LogicalPlan> chain = new ArrayList<>();
            chain.add(plan);
            LogicalPlan node = ((Project) plan).child();
            while (node instanceof Filter) {
                chain.add(node);
                node = ((Filter) node).child();
            }
            if (isOurs(node)) {
                AttributeSet needed = plan.references();
                AttributeSet filtered = AttributeSet$.MODULE$.empty();
                for (LogicalPlan step : chain) {
                    needed = needed.$plus$plus(step.references());
                    if (step != plan) {
                        filtered = filtered.$plus$plus(step.references());
                    }
                }
                LogicalPlan rebuilt = rebuild(node, needed, filtered);
                for (int i = chain.size() - 1; i >= 0; i--) {
                    rebuilt = chain.get(i).withNewChildren(seq(List.of(rebuilt)));
                }
                return rebuilt;
            }
        }
        if (isOurs(plan)) {
            return rebuild(plan, null, null);
        }
        List<LogicalPlan> children = CollectionConverters.asJava(plan.children());
        List<LogicalPlan> rewritten = new ArrayList<>(children.size());
        boolean changed = false;
        for (LogicalPlan child : children) {
            LogicalPlan next = rewrite(child);
            changed |= next != child;
            rewritten.add(next);
        }
        return changed ? plan.withNewChildren(seq(rewritten)) : plan;
    }

    /** A relation over the Python source `mergetree` that this rule has not rebuilt yet. */
    private static boolean isOurs(LogicalPlan plan) throws ReflectiveOperationException {
        if (!plan.getClass().getName().equals(RELATION)) {
            return false;
        }
        Object table = call(plan, "table");
        if (table instanceof MergeTreeSqlTable named) {
            table = named.inner();  // a table of the SQL catalog (MergeTreeCatalog): pruned alike
        }
        if (!table.getClass().getName().equals(PYTHON_TABLE) || !SOURCE_NAME.equals(((Table) table).name())) {
            return false;
        }
        StructField[] fields = schemaOf((Table) table).fields();
        return fields.length > 0 && !fields[0].metadata().contains(MARKER);
    }

    @SuppressWarnings("deprecation") // Table.schema(): what PythonTable implements in every 4.x
    private static StructType schemaOf(Table table) {
        return table.schema();
    }

    /**
     * The relation read through a provider of its own, with the attributes in `needed` (all when
     * null); its decimals that no filter uses (`filtered`: null when there are no filters) read as
     * unscaled longs under a Project that rebuilds them.
     */
    private LogicalPlan rebuild(LogicalPlan relation, AttributeSet needed, AttributeSet filtered)
            throws ReflectiveOperationException {
        Table relationTable = (Table) call(relation, "table");
        MergeTreeSqlTable named = relationTable instanceof MergeTreeSqlTable sql ? sql : null;
        Table table = named != null ? named.inner() : relationTable;
        @SuppressWarnings("unchecked")
        Seq<AttributeReference> output = (Seq<AttributeReference>) call(relation, "output");
        List<AttributeReference> all = CollectionConverters.asJava(output);
        List<AttributeReference> kept = new ArrayList<>();
        for (AttributeReference attribute : all) {
            if (needed == null || needed.contains(attribute)) {
                kept.add(attribute);
            }
        }
        if (kept.isEmpty() && !all.isEmpty()) {
            // A reader asked for no column returns no rows: keep the narrowest (count(*)).
            AttributeReference narrowest = all.get(0);
            for (AttributeReference attribute : all) {
                if (attribute.dataType().defaultSize() < narrowest.dataType().defaultSize()) {
                    narrowest = attribute;
                }
            }
            kept.add(narrowest);
        }
        String marker = conf().getConfString(PUSHDOWN_CONF, "false").trim().equalsIgnoreCase("true") ? "pushdown" : "scan";
        boolean fastTypes = conf().getConfString(FAST_TYPES_CONF, "true").trim().equalsIgnoreCase("true");
        StructType tableSchema = schemaOf(table);
        List<StructField> fields = new ArrayList<>();
        List<AttributeReference> scanned = new ArrayList<>();  // the scan's output
        List<NamedExpression> above = new ArrayList<>();  // the Project over it: `kept`, under their ids
        boolean unscaled = false;
        for (AttributeReference attribute : kept) {
            int index = tableSchema.getFieldIndex(attribute.name()).getOrElse(() -> -1);
            if (index < 0) {
                return relation;
            }
            StructField field = tableSchema.fields()[index];
            MetadataBuilder metadata = new MetadataBuilder().withMetadata(field.metadata()).putString(MARKER, marker);
            if (fastTypes && field.dataType() instanceof DecimalType decimal && decimal.precision() <= 18
                    && attribute.dataType().equals(decimal) && (filtered == null || !filtered.contains(attribute))) {
                metadata.putString(UNSCALED, decimal.precision() + "," + decimal.scale());
                AttributeReference longs = new AttributeReference(attribute.name(), DataTypes.LongType,
                        attribute.nullable(), attribute.metadata(), NamedExpression$.MODULE$.newExprId(),
                        attribute.qualifier());
                fields.add(new StructField(field.name(), DataTypes.LongType, field.nullable(), metadata.build()));
                scanned.add(longs);
                above.add(new Alias(new MakeDecimal(longs, decimal.precision(), decimal.scale(), true),
                        attribute.name(), attribute.exprId(), attribute.qualifier(), Option.empty(), seq(List.of())));
                unscaled = true;
            } else {
                fields.add(new StructField(field.name(), field.dataType(), field.nullable(), metadata.build()));
                scanned.add(attribute);
                above.add(attribute);
            }
        }
        StructType schema = new StructType(fields.toArray(new StructField[0]));

        Object provider = Class.forName(PYTHON_PROVIDER).getConstructor().newInstance();
        provider.getClass().getMethod("setShortName", String.class).invoke(provider, table.name());
        shareCreatedSource(table, provider);
        Table ownTable = ((TableProvider) provider).getTable(schema, new Transform[0], table.properties());
        long size = TableSizes.bytesOnDisk((CaseInsensitiveStringMap) call(relation, "options"));
        if (size >= 0) {
            // Of the columns read, as Spark scales a Parquet relation's file size under a projection.
            ownTable = new SizedTable(ownTable, Math.max(1L, (long) (size * width(kept) / Math.max(1.0, width(all)))));
        }
        if (named != null) {
            ownTable = named.withInner(ownTable);
        }

        // Rebuild with the relation's own constructor arguments (their number differs between
        // Spark versions), replacing the table and the output.
        int arity = relation.productArity();
        Object[] arguments = new Object[arity];
        int replaced = 0;
        for (int i = 0; i < arity; i++) {
            Object argument = relation.productElement(i);
            if (argument == relationTable) {
                argument = ownTable;
                replaced |= 1;
            } else if (argument == output) {
                argument = seq(scanned);
                replaced |= 2;
            }
            arguments[i] = argument;
        }
        if (replaced != 3) {
            return relation;
        }
        LogicalPlan scan = relation.makeCopy(arguments);
        return unscaled ? new Project(seq(above), scan) : scan;
    }

    private static double width(List<AttributeReference> attributes) {
        double total = 0;
        for (AttributeReference attribute : attributes) {
            total += attribute.dataType().defaultSize();
        }
        return total;
    }

    /**
     * The new provider starts with the Python data source the table's provider created when the
     * DataFrame was loaded (the pickled instance and its options), instead of asking a Python
     * worker to create it again. Where the fields differ (another Spark), it creates its own.
     */
    private static void shareCreatedSource(Table table, Object provider) {
        try {
            Field ds = table.getClass().getDeclaredField("ds");
            ds.setAccessible(true);
            Object original = ds.get(table);
            Field created = original.getClass().getDeclaredField("dataSourceInPython");
            created.setAccessible(true);
            Object source = created.get(original);
            if (source != null && provider.getClass() == original.getClass()) {
                created.set(provider, source);
            }
        } catch (ReflectiveOperationException | RuntimeException unexpected) {
            // The new provider creates the Python data source itself.
        }
    }

    private static Object call(Object target, String method) throws ReflectiveOperationException {
        Method getter = target.getClass().getMethod(method);
        return getter.invoke(target);
    }

    private static <T> Seq<T> seq(List<T> items) {
        return CollectionConverters.asScala(items).toList();
    }
}
