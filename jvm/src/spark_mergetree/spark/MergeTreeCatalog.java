package spark_mergetree.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.sql.catalyst.analysis.NoSuchNamespaceException;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.analysis.TableAlreadyExistsException;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.NamespaceChange;
import org.apache.spark.sql.connector.catalog.StagedTable;
import org.apache.spark.sql.connector.catalog.StagingTableCatalog;
import org.apache.spark.sql.connector.catalog.SupportsNamespaces;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.IdentityTransform;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The Spark SQL catalog of spark-mergetree: {@code spark.sql.catalog.<name>=spark_mergetree.spark.MergeTreeCatalog}
 * with {@code spark.sql.catalog.<name>.root=<Atomic catalog root>}. Namespaces are ClickHouse's
 * databases; tables are the root's tables, read and written by the Python data source {@code mergetree}.
 *
 * <p>Everything that needs the engine (listing, properties, DDL) runs in Python
 * (spark_mergetree/spark/sql_catalog.py). This class asks it through the Python source's own
 * {@code schema()} call: a {@code PythonDataSourceV2} for {@code mergetree} whose {@code inferSchema}
 * gets the options catalog=root, path=db.table and the call; the answer is JSON in the name of the
 * one field of the returned schema. That is the route Spark already takes for {@code load(path)}:
 * it runs in Spark's own Python workers with the session's interpreter and environment (on a
 * Spark Connect server too), needs no process, port or path of its own, and a table load costs one
 * Python round trip, after which the provider keeps the created source for the scan (the Python
 * side removes the call options from it), exactly as a path read does.
 */
public final class MergeTreeCatalog implements StagingTableCatalog, SupportsNamespaces {
    static final String SOURCE_NAME = "mergetree";
    static final String CALL = "mergetree_sql_call";
    static final String ARGS = "mergetree_sql_args";
    private static final ObjectMapper JSON = new ObjectMapper();
    // The last "package.Error: message" line of a Python traceback: what the user needs to read.
    private static final Pattern PYTHON_ERROR = Pattern.compile(
            "(?m)^(?:[A-Za-z_][\\w.]*\\.)?([A-Za-z_]\\w*(?:Error|Exception)): (.*)$");

    private String name;
    private String root;

    @Override
    public void initialize(String name, CaseInsensitiveStringMap options) {
        this.name = name;
        this.root = options.get("root");
        if (root == null || root.isBlank()) {
            throw new IllegalArgumentException("spark.sql.catalog." + name + ".root is not set: give the mergetree "
                    + "catalog the root directory of its Atomic catalog (spark_mergetree.configure(builder, catalog=root))");
        }
    }

    @Override
    public String name() {
        return name;
    }

    String root() {
        return root;
    }

    /** The answer of a Python call and the provider that ran it (which keeps the created source). */
    record Answer(JsonNode result, Object provider) {
    }

    Answer call(String what, String table, Map<String, Object> args) {
        Map<String, String> options = new HashMap<>();
        options.put("catalog", root);
        if (table != null) {
            options.put("path", table);
        }
        options.put(CALL, what);
        try {
            options.put(ARGS, JSON.writeValueAsString(args == null ? Map.of() : args));
            Object provider = newProvider();
            StructType answer = ((TableProvider) provider).inferSchema(new CaseInsensitiveStringMap(options));
            return new Answer(JSON.readTree(answer.fields()[0].name()), provider);
        } catch (ReflectiveOperationException | com.fasterxml.jackson.core.JsonProcessingException unexpected) {
            throw new IllegalStateException("the mergetree catalog could not call its Python side: " + unexpected, unexpected);
        } catch (RuntimeException error) {
            throw error;
        } catch (Exception error) {  // Scala's AnalysisException is a checked exception to Java
            throw new PythonCallError(error);
        }
    }

    /** A failed Python call (the Python error's traceback is in the cause's message). */
    static final class PythonCallError extends RuntimeException {
        PythonCallError(Exception cause) {
            super(cause.getMessage(), cause);
        }
    }

    static Object newProvider() throws ReflectiveOperationException {
        Object provider = Class.forName(ScanPerRelation.PYTHON_PROVIDER).getConstructor().newInstance();
        provider.getClass().getMethod("setShortName", String.class).invoke(provider, SOURCE_NAME);
        return provider;
    }

    /** The Python error's class and message, when `error` carries one (null otherwise). */
    static String[] pythonError(Throwable error) {
        for (Throwable cause = error; cause != null; cause = cause.getCause()) {
            String message = cause.getMessage();
            if (message == null) {
                continue;
            }
            Matcher matcher = PYTHON_ERROR.matcher(message);
            String[] last = null;
            while (matcher.find()) {
                last = new String[] {matcher.group(1), matcher.group(2)};
            }
            if (last != null) {
                return last;
            }
        }
        return null;
    }

    /** A Python error as the exception a SQL user reads: its message, without the traceback. */
    static RuntimeException userError(RuntimeException error) {
        String[] python = pythonError(error);
        if (python == null) {
            return error;
        }
        String message = "mergetree: " + python[1];
        if (python[0].equals("UnsupportedError")) {
            return new UnsupportedOperationException(message, error);
        }
        return new IllegalArgumentException(message, error);
    }

    private static boolean notFound(RuntimeException error) {
        String[] python = pythonError(error);
        return python != null && python[0].equals("TableNotFoundError");
    }

    static String database(String[] namespace) throws NoSuchNamespaceException {
        if (namespace.length != 1) {
            throw new NoSuchNamespaceException(namespace);
        }
        return namespace[0];
    }

    /** A path table's name, as Delta reads ``delta.`/path` ``: a directory or an object URL. */
    static boolean isPath(String name) {
        return name.startsWith("/") || name.contains("://");
    }

    static String tableName(Identifier ident) throws NoSuchTableException {
        if (ident.namespace().length == 0 && isPath(ident.name())) {
            return ident.name();  // <catalog>.`/data/events`: the table in that directory
        }
        if (ident.namespace().length != 1) {
            throw new NoSuchTableException(ident);
        }
        return ident.namespace()[0] + "." + ident.name();
    }

    // ------------------------------------------------------------------ namespaces

    private List<String> databases() {
        List<String> names = new ArrayList<>();
        try {
            call("namespaces", null, null).result().forEach(node -> names.add(node.asText()));
        } catch (RuntimeException error) {
            throw userError(error);
        }
        return names;
    }

    @Override
    public String[][] listNamespaces() {
        List<String> names = databases();
        String[][] out = new String[names.size()][];
        for (int i = 0; i < out.length; i++) {
            out[i] = new String[] {names.get(i)};
        }
        return out;
    }

    @Override
    public String[][] listNamespaces(String[] namespace) throws NoSuchNamespaceException {
        if (namespace.length == 0) {
            return listNamespaces();
        }
        loadNamespaceMetadata(namespace);
        return new String[0][];
    }

    @Override
    public Map<String, String> loadNamespaceMetadata(String[] namespace) throws NoSuchNamespaceException {
        if (!databases().contains(database(namespace))) {
            throw new NoSuchNamespaceException(namespace);
        }
        return new HashMap<>();
    }

    @Override
    public void createNamespace(String[] namespace, Map<String, String> metadata) {
        if (namespace.length != 1) {
            throw new IllegalArgumentException("mergetree: a namespace is a ClickHouse database, one name: "
                    + String.join(".", namespace));
        }
        try {
            call("create_namespace", null, Map.of("database", namespace[0]));
        } catch (RuntimeException error) {
            throw userError(error);
        }
    }

    @Override
    public void alterNamespace(String[] namespace, NamespaceChange... changes) {
        throw new UnsupportedOperationException("mergetree: a ClickHouse database has no properties to alter");
    }

    @Override
    public boolean dropNamespace(String[] namespace, boolean cascade) throws NoSuchNamespaceException {
        loadNamespaceMetadata(namespace);
        try {
            call("drop_namespace", null, Map.of("database", namespace[0], "cascade", cascade));
        } catch (RuntimeException error) {
            throw userError(error);
        }
        return true;
    }

    // ------------------------------------------------------------------ tables

    @Override
    public Identifier[] listTables(String[] namespace) throws NoSuchNamespaceException {
        String database = database(namespace);
        List<Identifier> out = new ArrayList<>();
        try {
            call("tables", null, Map.of("database", database)).result()
                    .forEach(node -> out.add(Identifier.of(namespace, node.asText())));
        } catch (RuntimeException error) {
            if (notFound(error)) {
                throw new NoSuchNamespaceException(namespace);
            }
            throw userError(error);
        }
        return out.toArray(new Identifier[0]);
    }

    @Override
    public Table loadTable(Identifier ident) throws NoSuchTableException {
        String[] namespace = ident.namespace();
        if (ident.name().equalsIgnoreCase(MergeTreeHistoryTable.NAME)
                && (namespace.length == 2 || namespace.length == 1 && isPath(namespace[0]))) {
            // <db>.<table>.history or `<path>`.history: the table's commits (a metadata table, as Iceberg names them)
            Identifier of = namespace.length == 2 ? Identifier.of(new String[] {namespace[0]}, namespace[1])
                    : Identifier.of(new String[0], namespace[0]);
            return new MergeTreeHistoryTable(this, of, tableName(of));
        }
        return load(ident, null);
    }

    /** VERSION AS OF: the table as of a commit sequence number (a `version` of its history table). */
    @Override
    public Table loadTable(Identifier ident, String version) throws NoSuchTableException {
        long snapshot;
        try {
            snapshot = Long.parseLong(version.trim());
        } catch (NumberFormatException notANumber) {
            throw new IllegalArgumentException("mergetree: VERSION AS OF takes a commit sequence number (a version "
                    + "that SELECT * FROM <table>.history lists), got '" + version + "'");
        }
        return load(ident, snapshot);
    }

    @Override
    public Table loadTable(Identifier ident, long timestamp) {
        throw new UnsupportedOperationException("mergetree: TIMESTAMP AS OF is not supported: read VERSION AS OF "
                + "<version>, taking the version from SELECT version, timestamp FROM <table>.history");
    }

    private Table load(Identifier ident, Long snapshot) throws NoSuchTableException {
        String table = tableName(ident);
        Answer answer;
        try {
            answer = call("load", table, snapshot == null ? null : Map.<String, Object>of("snapshot", snapshot));
        } catch (RuntimeException error) {
            if (notFound(error)) {
                throw new NoSuchTableException(ident);
            }
            throw userError(error);
        }
        StructType schema = (StructType) DataType.fromJson(answer.result().get("schema").asText());
        Map<String, String> properties = new HashMap<>();
        answer.result().get("properties").fields().forEachRemaining(e -> properties.put(e.getKey(), e.getValue().asText()));
        Table inner = ((TableProvider) answer.provider()).getTable(schema, new Transform[0], properties);
        Map<String, String> location = new HashMap<>(Map.of("path", table));
        if (!isPath(table)) {
            location.put("catalog", root);
        }
        if (snapshot != null) {
            location.put("snapshot", Long.toString(snapshot));
        }
        return new MergeTreeSqlTable(inner, name + "." + table, properties, location);
    }

    @Override
    @SuppressWarnings("deprecation") // the StructType form: what Spark 4.0's default Column[] form calls
    public Table createTable(Identifier ident, StructType schema, Transform[] partitions, Map<String, String> properties)
            throws TableAlreadyExistsException, NoSuchNamespaceException {
        String table;
        try {
            table = tableName(ident);
        } catch (NoSuchTableException wrongName) {
            throw new IllegalArgumentException("mergetree: a table is named <database>.<table>, got " + ident);
        }
        Map<String, String> given = withPartitioning(properties, partitions);
        if (tableExists(ident)) {
            throw new TableAlreadyExistsException(ident);
        }
        try {
            call("create", table, Map.of("schema", schema.json(), "properties", given));
        } catch (RuntimeException error) {
            String[] python = pythonError(error);
            if (python != null && python[0].equals("TableNotFoundError")) {
                throw new NoSuchNamespaceException(ident.namespace());
            }
            if (python != null && python[1].contains("already exists")) {
                throw new TableAlreadyExistsException(ident);
            }
            throw userError(error);
        }
        try {
            return loadTable(ident);
        } catch (NoSuchTableException gone) {
            throw new IllegalStateException("mergetree: " + table + " was created and is gone", gone);
        }
    }

    /**
     * CREATE TABLE ... AS SELECT and saveAsTable: checked now, created by the query's write job
     * (which also takes the write's own options, e.g. order_by; {@link StagedMergeTreeTable}).
     */
    @Override
    @SuppressWarnings("deprecation") // the StructType form: what the Column[] and TableInfo forms call
    public StagedTable stageCreate(Identifier ident, StructType schema, Transform[] partitions,
            Map<String, String> properties) throws TableAlreadyExistsException, NoSuchNamespaceException {
        String table;
        try {
            table = tableName(ident);
        } catch (NoSuchTableException wrongName) {
            throw new IllegalArgumentException("mergetree: a table is named <database>.<table>, got " + ident);
        }
        Map<String, String> given = withPartitioning(properties, partitions);
        if (tableExists(ident)) {
            throw new TableAlreadyExistsException(ident);
        }
        Map<String, String> options = new HashMap<>();
        try {
            call("stage_create", table, Map.of("schema", schema.json(), "properties", given)).result()
                    .fields().forEachRemaining(e -> options.put(e.getKey(), e.getValue().asText()));
        } catch (RuntimeException error) {
            if (notFound(error)) {
                throw new NoSuchNamespaceException(ident.namespace());
            }
            throw userError(error);
        }
        options.put("catalog", root);
        options.put("path", table);
        return new StagedMergeTreeTable(this, ident, schema, options);
    }

    @Override
    @SuppressWarnings("deprecation")
    public StagedTable stageReplace(Identifier ident, StructType schema, Transform[] partitions,
            Map<String, String> properties) {
        throw new UnsupportedOperationException(REPLACE_HINT);
    }

    @Override
    @SuppressWarnings("deprecation")
    public StagedTable stageCreateOrReplace(Identifier ident, StructType schema, Transform[] partitions,
            Map<String, String> properties) {
        throw new UnsupportedOperationException(REPLACE_HINT);
    }

    static final String REPLACE_HINT = "mergetree: REPLACE TABLE (and saveAsTable in mode 'overwrite') is not "
            + "supported: use INSERT OVERWRITE (df.write.mode('overwrite').insertInto(...)) into the existing table, "
            + "or DROP TABLE and CREATE TABLE";

    /** The properties with PARTITIONED BY (columns) as the property partition_by. */
    private static Map<String, String> withPartitioning(Map<String, String> properties, Transform[] partitions) {
        Map<String, String> given = new HashMap<>(properties);
        if (partitions.length == 0) {
            return given;
        }
        List<String> columns = new ArrayList<>();
        for (Transform transform : partitions) {
            if (!(transform instanceof IdentityTransform)) {
                throw new UnsupportedOperationException("mergetree: PARTITIONED BY takes columns; give an "
                        + "expression as the table property partition_by (TBLPROPERTIES ('partition_by' = '...'))");
            }
            NamedReference ref = ((IdentityTransform) transform).ref();
            columns.add(String.join(".", ref.fieldNames()));
        }
        if (given.containsKey("partition_by")) {
            throw new IllegalArgumentException("mergetree: PARTITIONED BY and the property partition_by both given");
        }
        given.put("partition_by", columns.size() == 1 ? columns.get(0) : "(" + String.join(", ", columns) + ")");
        return given;
    }

    @Override
    public Table alterTable(Identifier ident, TableChange... changes) throws NoSuchTableException {
        String table = tableName(ident);
        List<StructField> added = new ArrayList<>();
        for (TableChange change : changes) {
            if (change instanceof TableChange.AddColumn add && add.fieldNames().length == 1 && add.position() == null
                    && add.defaultValue() == null) {
                added.add(new StructField(add.fieldNames()[0], add.dataType(), add.isNullable(),
                        org.apache.spark.sql.types.Metadata.empty()));
            } else {
                throw new UnsupportedOperationException("mergetree: ALTER TABLE supports RENAME TO and ADD COLUMNS "
                        + "(top-level, nullable or not, at the end, without a default); not " + change);
            }
        }
        if (!added.isEmpty()) {
            try {
                call("add_columns", table, Map.of("schema", new StructType(added.toArray(new StructField[0])).json()));
            } catch (RuntimeException error) {
                if (notFound(error)) {
                    throw new NoSuchTableException(ident);
                }
                throw userError(error);
            }
        }
        return loadTable(ident);
    }

    @Override
    public boolean dropTable(Identifier ident) {
        String table;
        try {
            table = tableName(ident);
        } catch (NoSuchTableException wrongName) {
            return false;
        }
        try {
            return call("drop", table, null).result().asBoolean();
        } catch (RuntimeException error) {
            throw userError(error);
        }
    }

    @Override
    public void renameTable(Identifier oldIdent, Identifier newIdent) throws NoSuchTableException, TableAlreadyExistsException {
        String from = tableName(oldIdent);
        String to = newIdent.namespace().length == 0 ? oldIdent.namespace()[0] + "." + newIdent.name()
                : tableName(newIdent);
        if (tableExists(newIdent.namespace().length == 0 ? Identifier.of(oldIdent.namespace(), newIdent.name()) : newIdent)) {
            throw new TableAlreadyExistsException(newIdent);
        }
        try {
            call("rename", from, Map.of("to", to));
        } catch (RuntimeException error) {
            if (notFound(error)) {
                throw new NoSuchTableException(oldIdent);
            }
            throw userError(error);
        }
    }
}
