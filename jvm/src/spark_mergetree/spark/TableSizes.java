package spark_mergetree.spark;

import java.io.IOException;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Stream;

import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Bytes of a mergetree table's files, from its read options: the directory given as the path (a
 * local path or a file:// URL). Cached per directory until its modification time changes (a
 * commit renames parts into it). -1 when not known (a catalog table: its name is resolved in Python).
 */
final class TableSizes {
    private static final Map<Path, long[]> CACHE = new ConcurrentHashMap<>();

    private TableSizes() {
    }

    static long bytesOnDisk(CaseInsensitiveStringMap options) {
        String path = options.get("path");
        if (path == null || options.containsKey("catalog")) {
            return -1;
        }
        try {
            Path directory = path.startsWith("file:") ? Paths.get(URI.create(path)) : Paths.get(path);
            long modified = Files.getLastModifiedTime(directory).toMillis();
            long[] cached = CACHE.get(directory);
            if (cached != null && cached[0] == modified) {
                return cached[1];
            }
            long total;
            try (Stream<Path> files = Files.walk(directory)) {
                total = files.mapToLong(TableSizes::sizeOf).sum();
            }
            CACHE.put(directory, new long[] {modified, total});
            return total;
        } catch (IOException | RuntimeException unknown) {
            return -1;
        }
    }

    private static long sizeOf(Path file) {
        try {
            BasicFileAttributes attributes = Files.readAttributes(file, BasicFileAttributes.class);
            return attributes.isRegularFile() ? attributes.size() : 0;
        } catch (IOException gone) {
            return 0;
        }
    }
}
