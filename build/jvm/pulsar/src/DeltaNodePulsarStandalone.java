import java.io.File;
import org.apache.pulsar.PulsarStandaloneStarter;
import org.apache.pulsar.metadata.api.MetadataStoreConfig;
import org.apache.pulsar.metadata.api.extended.MetadataStoreExtended;

/**
 * Pulsar's PulsarStandaloneStarter, after clearing the ephemeral nodes a killed run left in the
 * RocksDB metadata store.
 *
 * RocksdbMetadataStore deletes a dead session's ephemeral node lazily, when it is first read. If
 * that first read is the bookie's own registration lock (/ledgers/available/BOOKIE), the late
 * "deleted" notification invalidates the lock the new bookie just took, and ResourceLockImpl can
 * loop (delete, re-create, invalidated) for ever: the broker then finds no bookie and refuses every
 * write ("Not enough non-faulty bookies available"). Reading the whole tree once, before any lock
 * exists, makes those lazy deletions happen while nothing depends on them.
 */
public final class DeltaNodePulsarStandalone {
    public static void main(String[] args) throws Exception {
        String dir = null;
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals("--metadata-dir")) {
                dir = args[i + 1];
            }
        }
        if (dir != null && new File(dir).isDirectory()) {
            String url = "rocksdb://" + new File(dir).getAbsolutePath();
            try (MetadataStoreExtended store = MetadataStoreExtended.create(url,
                    MetadataStoreConfig.builder().metadataStoreName(MetadataStoreConfig.METADATA_STORE).build())) {
                walk(store, "/");
                Thread.sleep(100);   // the deletions notify asynchronously: let them drain before closing
            }
        }
        PulsarStandaloneStarter.main(args);
    }

    private static void walk(MetadataStoreExtended store, String path) {
        for (String child : store.getChildren(path).join()) {
            walk(store, path.equals("/") ? "/" + child : path + "/" + child);
        }
    }
}
