// WarmThenMeasure runs Kafka's ProducerPerformance twice in one JVM: a
// warm-up of the first argument's records, whose report is discarded, then
// the measured run with the arguments that follow. A JVM's start (class
// loading, the JIT, the first metadata wait, then the records the tool's
// schedule owes sent at once) beside a loaded broker otherwise falls inside
// the measured run and sets its p99: a CI run read 15 ms against 6 alone
// with its first 5 s averaging 3.9 ms and the rest 1.0-1.1. The marker line
// tells the test where the measured run's report begins. Launched as a
// source file (java Launcher.java), so nothing is built ahead.
import java.util.Arrays;

public class WarmThenMeasure {
    public static void main(String[] args) throws Exception {
        String[] measured = Arrays.copyOfRange(args, 1, args.length);
        String[] warm = measured.clone();
        int at = Arrays.asList(warm).indexOf("--num-records");
        if (at < 0 || at + 1 >= warm.length) {
            throw new IllegalArgumentException("no --num-records to shorten for the warm-up");
        }
        warm[at + 1] = args[0];
        org.apache.kafka.tools.ProducerPerformance.main(warm);
        System.out.println("measured run begins");
        System.out.flush();
        org.apache.kafka.tools.ProducerPerformance.main(measured);
    }
}
