/*
 * format("klog") with Spark's Update output mode.
 *
 * klog's Spark source is a Python data source, and Spark wraps every Python data source in
 * PythonDataSourceV2 -> PythonTable -> PythonWriteBuilder. Spark accepts
 * writeStream.outputMode("update") only when the write builder implements
 * SupportsStreamingUpdateAsAppend (V2Writes), which PythonWriteBuilder does not, so Spark refuses
 * "klog does not support Update mode" before klog sees the write.
 *
 * When a format name is no JVM-registered short name, DataSource.lookupDataSource loads the class
 * "<name>.DefaultSource" before it falls back to a Python data source of that name: with this jar on
 * the driver's classpath, format("klog") resolves to klog.DefaultSource. It is a PythonDataSourceV2
 * (Spark gives it the short name "klog" and it finds klog's registered Python source by that name),
 * so reads and writes run exactly as without the jar; the only difference is that its write builder
 * says Update mode appends each updated row, as Spark's own Kafka sink does. Without the jar
 * format("klog") is the plain Python data source.
 *
 * Built by `python -m klog.spark.jar` into klog-spark.jar beside this file.
 */
package klog;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.internal.connector.SupportsStreamingUpdateAsAppend;
import org.apache.spark.sql.types.StructType;

public class DefaultSource extends PythonDataSourceV2 {
    private String shortName;

    @Override
    public void setShortName(String name) {
        super.setShortName(name);
        shortName = name;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        try {
            return new UpdateAsAppendTable(this, shortName, schema);
        } catch (LinkageError e) {
            // a Spark whose Python table differs from the one this was compiled against (4.0 to 4.3):
            // format("klog") still works, as the plain Python data source, without Update mode
            return super.getTable(schema, partitioning, properties);
        }
    }

    /** Spark's table for a Python data source, with a write builder that also takes Update mode. */
    public static class UpdateAsAppendTable extends PythonTable {
        public UpdateAsAppendTable(PythonDataSourceV2 source, String shortName, StructType schema) {
            super(source, shortName, schema);
        }

        @Override
        public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
            return new UpdateAsAppendWriteBuilder(super.newWriteBuilder(info));
        }
    }

    /** Delegates to Spark's Python write builder; Update mode builds the same write as Append. */
    public static class UpdateAsAppendWriteBuilder implements SupportsTruncate, SupportsStreamingUpdateAsAppend {
        private final WriteBuilder python;

        public UpdateAsAppendWriteBuilder(WriteBuilder python) {
            this.python = python;
        }

        @Override
        public WriteBuilder truncate() {
            // Complete mode and batch overwrite: klog's Python writers decide (the stream appends, a batch refuses)
            ((SupportsTruncate) python).truncate();
            return this;
        }

        @Override
        public Write build() {
            return python.build();
        }
    }
}
