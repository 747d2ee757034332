/**
 * Two hot methods, one given three times the work of the other: CPU
 * samples of this JVM must name both, in that ratio, from the perf map the
 * JVM writes (-XX:+DumpPerfMapAtExit). Burns for args[0] seconds, then
 * prints its pid (as it sees it) and its main thread's CPU time as JSON.
 * Run by e2e stacks::a_jvms_hot_methods_are_named_from_the_perf_map_it_writes_as_it_exits.
 */
public final class HbHot {
    static volatile long sink;

    // The same loop in both (a linear congruential step the JIT cannot
    // fold), three times as many rounds in alpha; written out in each so
    // that each is the leaf of its own samples.
    static long hbHotAlpha(long x) {
        for (int i = 0; i < 3 * 20_000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    static long hbHotBeta(long x) {
        for (int i = 0; i < 20_000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    public static void main(String[] args) {
        long burnNs = (long) (Double.parseDouble(args[0]) * 1e9);
        long start = System.nanoTime();
        long x = 1;
        while (System.nanoTime() - start < burnNs) {
            for (int i = 0; i < 100; i++) {
                x = hbHotAlpha(x);
                x = hbHotBeta(x);
            }
        }
        sink = x;
        long cpuNs = java.lang.management.ManagementFactory.getThreadMXBean().getCurrentThreadCpuTime();
        System.out.println("{\"pid\":" + ProcessHandle.current().pid() + ",\"main_thread_cpu_ns\":" + cpuNs + "}");
    }
}
