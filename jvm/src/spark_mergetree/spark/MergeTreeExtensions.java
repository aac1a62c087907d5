package spark_mergetree.spark;

import org.apache.spark.sql.SparkSessionExtensions;

import scala.Function1;
import scala.runtime.BoxedUnit;

/**
 * The session extension of spark-mergetree ({@code spark.sql.extensions=spark_mergetree.spark.MergeTreeExtensions}):
 * injects {@link ScanPerRelation} as a pre-CBO optimizer rule, which runs after Catalyst's own column
 * pruning and right before the scan push-down batch.
 */
public final class MergeTreeExtensions implements Function1<SparkSessionExtensions, BoxedUnit> {
    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectPreCBORule(session -> new ScanPerRelation());
        // SQL DML on catalog tables (MergeTreeDml) and the OPTIMIZE statement (MergeTreeSqlParser).
        extensions.injectPostHocResolutionRule(session -> new MergeTreeDml());
        extensions.injectParser((session, delegate) -> new MergeTreeSqlParser(delegate));
        return BoxedUnit.UNIT;
    }
}
