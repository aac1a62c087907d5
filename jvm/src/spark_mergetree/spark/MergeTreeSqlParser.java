package spark_mergetree.spark;

import java.util.HashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.DeleteFromTable;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Spark's parser plus two statements of ours. {@code DESCRIBE HISTORY <catalog>.<db>.<table>} (as
 * Delta spells it) is {@code SELECT * FROM <catalog>.<db>.<table>.history ORDER BY version} (the
 * metadata table {@link MergeTreeHistoryTable}). {@code OPTIMIZE [TABLE] t [WHERE cond] [FINAL]} (as
 * Delta and ClickHouse spell it). It is parsed as Spark's {@code DELETE FROM t [WHERE cond]} whose
 * table reference carries the option {@value MergeTreeCatalog#CALL} = optimize (and final), which
 * {@link MergeTreeDml} turns into the table's OPTIMIZE when the table is a mergetree catalog table
 * (and which, on any other table, fails as an unknown delete). Everything else is Spark's.
 */
public final class MergeTreeSqlParser implements ParserInterface {
    private static final Pattern OPTIMIZE = Pattern.compile(
            "(?is)^\\s*OPTIMIZE\\s+(?:TABLE\\s+)?((?:`[^`]+`|[\\w$]+)(?:\\s*\\.\\s*(?:`[^`]+`|[\\w$]+))*)"
                    + "(?:\\s+WHERE\\s+(.+?))?(\\s+FINAL)?\\s*;?\\s*$");
    // DESCRIBE HISTORY t (Delta's spelling): the rows of the metadata table t.history, oldest first
    private static final Pattern HISTORY = Pattern.compile(
            "(?is)^\\s*DESC(?:RIBE)?\\s+HISTORY\\s+((?:`[^`]+`|[\\w$]+)(?:\\s*\\.\\s*(?:`[^`]+`|[\\w$]+))*)\\s*;?\\s*$");
    static final String FINAL_OPTION = "mergetree_sql_final";
    private final ParserInterface delegate;

    public MergeTreeSqlParser(ParserInterface delegate) {
        this.delegate = delegate;
    }

    @Override
    public LogicalPlan parsePlan(String sqlText) throws ParseException {
        Matcher history = HISTORY.matcher(sqlText);
        if (history.matches()) {
            return delegate.parsePlan("SELECT * FROM " + history.group(1) + "." + MergeTreeHistoryTable.NAME
                    + " ORDER BY version");
        }
        Matcher matcher = OPTIMIZE.matcher(sqlText);
        if (!matcher.matches()) {
            return delegate.parsePlan(sqlText);
        }
        String where = matcher.group(2);
        LogicalPlan delete = delegate.parsePlan("DELETE FROM " + matcher.group(1) + (where == null ? "" : " WHERE " + where));
        if (!(delete instanceof DeleteFromTable)) {
            return delete;
        }
        Map<String, String> options = new HashMap<>();
        options.put(MergeTreeCatalog.CALL, "optimize");
        options.put(FINAL_OPTION, Boolean.toString(matcher.group(3) != null));
        if (where != null) {
            options.put(MergeTreeDml.WHERE_OPTION, where.trim());
        }
        LogicalPlan relation = MergeTreeDml.withOptions(((DeleteFromTable) delete).table(), new CaseInsensitiveStringMap(options));
        return new DeleteFromTable(relation, ((DeleteFromTable) delete).condition());
    }

    @Override
    public Expression parseExpression(String sqlText) throws ParseException {
        return delegate.parseExpression(sqlText);
    }

    @Override
    public TableIdentifier parseTableIdentifier(String sqlText) throws ParseException {
        return delegate.parseTableIdentifier(sqlText);
    }

    @Override
    public FunctionIdentifier parseFunctionIdentifier(String sqlText) throws ParseException {
        return delegate.parseFunctionIdentifier(sqlText);
    }

    @Override
    public scala.collection.immutable.Seq<String> parseMultipartIdentifier(String sqlText) throws ParseException {
        return delegate.parseMultipartIdentifier(sqlText);
    }

    @Override
    public LogicalPlan parseQuery(String sqlText) throws ParseException {
        return delegate.parseQuery(sqlText);
    }

    @Override
    public StructType parseRoutineParam(String sqlText) throws ParseException {
        return delegate.parseRoutineParam(sqlText);
    }

    @Override
    public org.apache.spark.sql.catalyst.parser.SqlStatementSplitResult splitStatements(String sqlText) {
        return delegate.splitStatements(sqlText);  // Spark 4.3+; never called by older ones
    }

    @Override
    public StructType parseTableSchema(String sqlText) throws ParseException {
        return delegate.parseTableSchema(sqlText);
    }

    @Override
    public DataType parseDataType(String sqlText) throws ParseException {
        return delegate.parseDataType(sqlText);
    }
}
