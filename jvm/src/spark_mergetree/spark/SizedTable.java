package spark_mergetree.spark;

import java.util.Map;
import java.util.OptionalLong;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.Statistics;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsReportStatistics;
import org.apache.spark.sql.internal.connector.SupportsMetadata;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A Python data source's table whose scans report an estimated size, so Spark plans joins with
 * small mergetree tables as it does with small Parquet tables (broadcast, not shuffle): a Python
 * scan reports no statistics, which Spark takes as "bigger than anything". Everything else is the
 * wrapped table's and scan's own.
 */
final class SizedTable implements Table, SupportsRead {
    private final Table inner;
    private final long sizeInBytes;

    SizedTable(Table inner, long sizeInBytes) {
        this.inner = inner;
        this.sizeInBytes = sizeInBytes;
    }

    @Override
    public String name() {
        return inner.name();
    }

    @Override
    @SuppressWarnings("deprecation") // what PythonTable implements in every 4.x
    public StructType schema() {
        return inner.schema();
    }

    @Override
    public Transform[] partitioning() {
        return inner.partitioning();
    }

    @Override
    public Map<String, String> properties() {
        return inner.properties();
    }

    @Override
    public Set<TableCapability> capabilities() {
        return inner.capabilities();
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        return new Builder(((SupportsRead) inner).newScanBuilder(options), sizeInBytes);
    }

    @Override
    public String toString() {
        return inner.toString();
    }

    private static final class Builder implements SupportsPushDownFilters {
        private final ScanBuilder inner;
        private final long sizeInBytes;

        Builder(ScanBuilder inner, long sizeInBytes) {
            this.inner = inner;
            this.sizeInBytes = sizeInBytes;
        }

        @Override
        public Filter[] pushFilters(Filter[] filters) {
            return inner instanceof SupportsPushDownFilters ? ((SupportsPushDownFilters) inner).pushFilters(filters) : filters;
        }

        @Override
        public Filter[] pushedFilters() {
            return inner instanceof SupportsPushDownFilters ? ((SupportsPushDownFilters) inner).pushedFilters() : new Filter[0];
        }

        @Override
        public Scan build() {
            return new SizedScan(inner.build(), sizeInBytes);
        }
    }

    private static final class SizedScan implements SupportsReportStatistics, SupportsMetadata {
        private final Scan inner;
        private final long sizeInBytes;

        SizedScan(Scan inner, long sizeInBytes) {
            this.inner = inner;
            this.sizeInBytes = sizeInBytes;
        }

        @Override
        public Statistics estimateStatistics() {
            return new Statistics() {
                @Override
                public OptionalLong sizeInBytes() {
                    return OptionalLong.of(sizeInBytes);
                }

                @Override
                public OptionalLong numRows() {
                    return OptionalLong.empty();
                }
            };
        }

        @Override
        public StructType readSchema() {
            return inner.readSchema();
        }

        @Override
        public String description() {
            return inner.description();
        }

        @Override
        public Batch toBatch() {
            return inner.toBatch();
        }

        @Override
        public CustomMetric[] supportedCustomMetrics() {
            return inner.supportedCustomMetrics();
        }

        @Override
        public CustomTaskMetric[] reportDriverMetrics() {
            return inner.reportDriverMetrics();
        }

        @Override
        public ColumnarSupportMode columnarSupportMode() {
            return inner.columnarSupportMode();
        }

        @Override
        public scala.collection.immutable.Map<String, String> getMetaData() {
            return inner instanceof SupportsMetadata ? ((SupportsMetadata) inner).getMetaData()
                    : scala.collection.immutable.Map$.MODULE$.empty();
        }

        @Override
        public String toString() {
            return inner.toString();
        }
    }
}
