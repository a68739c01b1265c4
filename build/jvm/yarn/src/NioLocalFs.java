/*
 * The local file system for YarnLauncher's NodeManager, with permissions set in this JVM.
 *
 * Without Hadoop's native library (no Maven artifact carries it) RawLocalFileSystem sets a file's
 * permissions by running a chmod process, and the NodeManager's localizer sets them on every file
 * of an archive it unpacks: 12,000 processes for DeltaNode's env archive, a minute of a 2-core
 * machine. java.nio sets the same bits without a process. A core-site.xml on the JVM's class path
 * names this class in fs.AbstractFileSystem.file.impl (tests/integration/yarn_cluster.py writes it:
 * the localizer's file system comes from a Configuration of its own, not from the launcher's);
 * everything else is Hadoop's LocalFs unchanged.
 */

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.local.LocalConfigKeys;
import org.apache.hadoop.fs.permission.FsPermission;

public final class NioLocalFs extends ChecksumFs {
    public NioLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
        super(new Raw(conf));
    }

    /** Hadoop's RawLocalFs (whose constructors are package-private) over NioRawLocalFileSystem. */
    private static final class Raw extends DelegateToFileSystem {
        Raw(Configuration conf) throws IOException, URISyntaxException {
            super(FsConstants.LOCAL_FS_URI, new NioRawLocalFileSystem(), conf, FsConstants.LOCAL_FS_URI.getScheme(),
                  false);
        }

        @Override
        public int getUriDefaultPort() {
            return -1;
        }

        @Override
        public FsServerDefaults getServerDefaults(Path f) throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        @Deprecated
        public FsServerDefaults getServerDefaults() throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        public boolean isValidName(String src) {
            return true;
        }
    }

    static final class NioRawLocalFileSystem extends RawLocalFileSystem {
        @Override
        public void setPermission(Path p, FsPermission permission) throws IOException {
            if (permission.getStickyBit()) {   // java.nio has no sticky bit
                super.setPermission(p, permission);
                return;
            }
            Files.setPosixFilePermissions(pathToFile(p).toPath(),
                                          PosixFilePermissions.fromString(permission.toString().substring(0, 9)));
        }
    }
}
