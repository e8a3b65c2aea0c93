// The partition the Java producer (kafka-clients) gives each key: `java -cp kafka-clients.jar JavaPartitions.java N`
// reads one hex-encoded key a line on stdin and prints its partition among N. BuiltInPartitioner.partitionForKey is
// what KafkaProducer calls for a record with a key and no explicit partition or custom partitioner.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;

public class JavaPartitions {
    public static void main(String[] args) throws Exception {
        int partitions = Integer.parseInt(args[0]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        StringBuilder out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            byte[] key = HexFormat.of().parseHex(line);
            out.append(BuiltInPartitioner.partitionForKey(key, partitions)).append('\n');
        }
        System.out.print(out);
    }
}
