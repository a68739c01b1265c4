/*
 * A single-node YARN for DeltaNode's tests: a ResourceManager and one NodeManager in this JVM
 * (Hadoop's MiniYARNCluster, which has no main class of its own).
 *
 *   java -cp 'jars/yarn/*' YarnLauncher CONF_DIR MEMORY_MB VCORES
 *
 * The cluster's work directories go under ./target/ (MiniYARNCluster's choice): run it in its data
 * directory. Once the NodeManager has registered, CONF_DIR gets a yarn-site.xml with the
 * ResourceManager's addresses and a core-site.xml with the local file system as the default one,
 * for HADOOP_CONF_DIR, and a line "YARN ready: ..." is printed. Stops on SIGTERM.
 */

import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

public final class YarnLauncher {
    private static final String[] CLIENT_KEYS = {
        YarnConfiguration.RM_ADDRESS, YarnConfiguration.RM_SCHEDULER_ADDRESS,
        YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS, YarnConfiguration.RM_ADMIN_ADDRESS,
        YarnConfiguration.RM_WEBAPP_ADDRESS, YarnConfiguration.RM_HOSTNAME,
    };

    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable e) {
            // The RM's and NM's threads would keep a half-started JVM alive: exit, so the caller sees it.
            e.printStackTrace();
            System.exit(1);
        }
    }

    private static void run(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: YarnLauncher CONF_DIR MEMORY_MB VCORES");
            System.exit(2);
        }
        File confDir = new File(args[0]);
        int memoryMb = Integer.parseInt(args[1]);
        int vcores = Integer.parseInt(args[2]);

        YarnConfiguration conf = new YarnConfiguration();
        conf.set(YarnConfiguration.RM_HOSTNAME, "127.0.0.1");
        // hadoop-client-minicluster carries no capacity-scheduler.xml: one queue, given in code.
        conf.set("yarn.scheduler.capacity.root.queues", "default");
        conf.set("yarn.scheduler.capacity.root.default.capacity", "100");
        conf.set("yarn.scheduler.capacity.root.default.maximum-capacity", "100");
        conf.set("yarn.scheduler.capacity.root.default.user-limit-factor", "1");
        conf.set("yarn.scheduler.capacity.root.default.state", "RUNNING");
        conf.set("yarn.scheduler.capacity.root.default.acl_submit_applications", "*");
        conf.set("yarn.scheduler.capacity.root.default.acl_administer_queue", "*");
        conf.set("yarn.scheduler.capacity.node-locality-delay", "-1");
        // A full disk would mark the only node unhealthy and leave every application waiting.
        conf.set("yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage", "100.0");
        // Containers are JVMs and Python workers sharing this machine: no memory policing.
        conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
        conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
        conf.setInt(YarnConfiguration.NM_PMEM_MB, memoryMb);
        conf.setInt(YarnConfiguration.YARN_MINICLUSTER_NM_PMEM_MB, memoryMb);   // what MiniYARNCluster gives its NM
        conf.setInt(YarnConfiguration.NM_VCORES, vcores);
        conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, memoryMb);
        conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 128);
        conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_VCORES, vcores);
        // A finished container's directory is deleted at once, as on a real node.
        conf.setInt(YarnConfiguration.DEBUG_NM_DELETE_DELAY_SEC, 0);

        MiniYARNCluster cluster = new MiniYARNCluster("deltanode-yarn", 1, 1, 1);
        cluster.init(conf);
        cluster.start();
        Runtime.getRuntime().addShutdownHook(new Thread(cluster::stop, "yarn-stop"));
        if (!cluster.waitForNodeManagersToConnect(60_000)) {
            throw new IllegalStateException("the NodeManager did not register with the ResourceManager within 60 s");
        }
        // The ResourceManager writes its bound ports into the configuration after start returns.
        Configuration bound = cluster.getConfig();
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (bound.get(YarnConfiguration.RM_ADDRESS).endsWith(":0")) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("the ResourceManager's address was never bound");
            }
            Thread.sleep(100);
        }

        Configuration site = new Configuration(false);
        for (String key : CLIENT_KEYS) {
            site.set(key, bound.get(key));
        }
        Configuration core = new Configuration(false);
        core.set("fs.defaultFS", "file:///");
        confDir.mkdirs();
        write(core, new File(confDir, "core-site.xml"));
        write(site, new File(confDir, "yarn-site.xml"));   // last: its presence means ready
        System.out.println("YARN ready: resourcemanager " + bound.get(YarnConfiguration.RM_ADDRESS)
                + " webapp " + bound.get(YarnConfiguration.RM_WEBAPP_ADDRESS)
                + " workdir " + cluster.getTestWorkDir().getAbsolutePath());
        System.out.flush();
        Thread.currentThread().join();
    }

    private static void write(Configuration conf, File target) throws Exception {
        File tmp = new File(target.getParentFile(), "." + target.getName() + ".tmp");
        try (OutputStream out = new FileOutputStream(tmp)) {
            conf.writeXml(out);
        }
        Files.move(tmp.toPath(), target.toPath(), StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    }
}
