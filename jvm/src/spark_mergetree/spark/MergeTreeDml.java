package spark_mergetree.spark;

import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.plans.logical.Assignment;
import org.apache.spark.sql.catalyst.plans.logical.DeleteFromTable;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.plans.logical.UpdateTable;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.catalyst.trees.Origin;
import org.apache.spark.sql.connector.catalog.SupportsDeleteV2;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import scala.jdk.javaapi.CollectionConverters;

/**
 * DELETE FROM, UPDATE and OPTIMIZE on a mergetree catalog table, after analysis: each becomes
 * Spark's DELETE plan over an {@link Operation} table, whose {@code deleteWhere} (or
 * {@code truncateTable}, for no condition) Spark calls once, when the statement runs (EXPLAIN runs
 * nothing), and which runs the engine's operation in Python (spark/sql_catalog.py: the same engine
 * steps as spark_mergetree.delete/update/optimize). Conditions and values go to Python as the
 * user wrote them (ClickHouse syntax, as those functions take them), taken from the statement's text.
 */
public final class MergeTreeDml extends Rule<LogicalPlan> {
    static final String WHERE_OPTION = "mergetree_sql_where";
    static final String TXN_CONF = "spark.mergetree.transaction";

    @Override
    public String ruleName() {
        return "spark_mergetree.MergeTreeDml";
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        try {
            if (plan instanceof UpdateTable update && update.resolved()) {
                Map<String, Object> args = new HashMap<>();
                Map<String, String> set = new HashMap<>();
                for (Assignment assignment : CollectionConverters.asJava(update.assignments())) {
                    String column = assignment.key() instanceof org.apache.spark.sql.catalyst.expressions.Attribute a
                            ? a.name() : assignment.key().sql();
                    set.put(column, text(assignment.value()));
                }
                args.put("set", set);
                Expression condition = update.condition().isDefined() ? update.condition().get() : Literal.TrueLiteral();
                if (update.condition().isDefined()) {
                    args.put("where", text(condition));
                }
                return rewrite(update.table(), "update", args, condition, plan);
            }
            if (plan instanceof DeleteFromTable delete && delete.resolved()) {
                LogicalPlan relation = unalias(delete.table());
                CaseInsensitiveStringMap options = relationOptions(relation);
                Map<String, Object> args = new HashMap<>();
                Expression condition = delete.condition();
                boolean always = condition instanceof Literal literal && Boolean.TRUE.equals(literal.value());
                if (options != null && "optimize".equals(options.get(MergeTreeCatalog.CALL))) {
                    args.put("final", Boolean.parseBoolean(options.get(MergeTreeSqlParser.FINAL_OPTION)));
                    if (options.containsKey(WHERE_OPTION)) {
                        args.put("where", options.get(WHERE_OPTION));
                    }
                    return rewrite(delete.table(), "optimize", args, condition, plan);
                }
                if (!always) {
                    args.put("where", text(condition));
                }
                return rewrite(delete.table(), "delete", args, condition, plan);
            }
        } catch (ReflectiveOperationException unexpected) {
            return plan;  // another Spark than this was written for: Spark's own handling
        }
        return plan;
    }

    private LogicalPlan rewrite(LogicalPlan target, String what, Map<String, Object> args, Expression condition,
            LogicalPlan original) throws ReflectiveOperationException {
        LogicalPlan relation = unalias(target);
        if (!relation.getClass().getName().equals(ScanPerRelation.RELATION)) {
            return original;
        }
        Object table = relation.getClass().getMethod("table").invoke(relation);
        if (!(table instanceof MergeTreeSqlTable named)) {
            return original;
        }
        String transaction = conf().getConfString(TXN_CONF, "");
        if (!transaction.isBlank()) {
            args.put("transaction", transaction);
        }
        Operation operation = new Operation(named, what, args);
        int arity = relation.productArity();
        Object[] arguments = new Object[arity];
        for (int i = 0; i < arity; i++) {
            Object argument = relation.productElement(i);
            arguments[i] = argument == table ? operation : argument;
        }
        // Always "delete everything": Spark then calls truncateTable() and translates no condition
        // (the operation has the statement's own).
        return new DeleteFromTable(relation.makeCopy(arguments), Literal.TrueLiteral());
    }

    private static LogicalPlan unalias(LogicalPlan plan) {
        while (plan instanceof SubqueryAlias alias) {
            plan = alias.child();
        }
        return plan;
    }

    private static CaseInsensitiveStringMap relationOptions(LogicalPlan relation) {
        try {
            Object options = relation.getClass().getMethod("options").invoke(relation);
            return options instanceof CaseInsensitiveStringMap map ? map : null;
        } catch (ReflectiveOperationException | RuntimeException none) {
            return null;
        }
    }

    /** An unresolved table reference (the parser's) with `options` added: Spark's relation keeps them. */
    static LogicalPlan withOptions(LogicalPlan plan, CaseInsensitiveStringMap options) {
        int arity = plan.productArity();
        Object[] arguments = new Object[arity];
        boolean replaced = false;
        for (int i = 0; i < arity; i++) {
            Object argument = plan.productElement(i);
            if (argument instanceof CaseInsensitiveStringMap && !replaced) {
                argument = options;
                replaced = true;
            }
            arguments[i] = argument;
        }
        return replaced ? plan.makeCopy(arguments) : plan;
    }

    /** The expression as the statement spelled it (its origin), else as Spark prints it. */
    static String text(Expression expression) {
        Origin origin = expression.origin();
        if (origin.sqlText().isDefined() && origin.startIndex().isDefined() && origin.stopIndex().isDefined()) {
            int start = (Integer) origin.startIndex().get();
            int stop = (Integer) origin.stopIndex().get();
            String sql = origin.sqlText().get();
            if (0 <= start && start <= stop && stop < sql.length()) {
                return sql.substring(start, stop + 1);
            }
        }
        return expression.sql();
    }

    /**
     * A DML statement on a catalog table, in the form Spark runs a DELETE: {@code deleteWhere} /
     * {@code truncateTable} run the operation in Python once (Spark's predicates are not used:
     * the statement's own condition is in `args`).
     */
    static final class Operation implements SupportsDeleteV2, SupportsRead {
        private final MergeTreeSqlTable table;
        private final String what;
        private final Map<String, Object> args;

        Operation(MergeTreeSqlTable table, String what, Map<String, Object> args) {
            this.table = table;
            this.what = what;
            this.args = args;
        }

        @Override
        public String name() {
            return table.name();
        }

        @Override
        @SuppressWarnings("deprecation")
        public StructType schema() {
            return table.schema();
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.BATCH_READ);  // Spark checks it of a relation in any plan
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return table.newScanBuilder(options);
        }

        @Override
        public boolean canDeleteWhere(Predicate[] predicates) {
            return true;
        }

        @Override
        public void deleteWhere(Predicate[] predicates) {
            run();
        }

        @Override
        public boolean truncateTable() {
            run();
            return true;
        }

        private void run() {
            Map<String, String> location = table.location();
            MergeTreeCatalog catalog = new MergeTreeCatalog();
            // a path table (<catalog>.`/dir`) has no root in its location; Python's call on a path ignores it
            String root = location.getOrDefault("catalog", location.get("path"));
            catalog.initialize(table.name(), new CaseInsensitiveStringMap(Map.of("root", root)));
            try {
                catalog.call(what, location.get("path"), args);
            } catch (RuntimeException error) {
                throw MergeTreeCatalog.userError(error);
            }
        }

        @Override
        public String toString() {
            return what + " " + table.name();
        }
    }
}
