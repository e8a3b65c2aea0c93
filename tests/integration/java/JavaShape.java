// What a JVM consumer sees of a topic: `java -cp 'dev/kafka/lib/*' JavaShape.java BOOTSTRAP TOPIC` reads every
// committed message (isolation.level=read_committed, as the README tells consumers to) with kafka-clients' own
// KafkaConsumer and byte-array deserializers, and prints one tab-separated line per message: partition, offset,
// timestamp type, timestamp, the key in hex, then each header as name=hex-value.
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class JavaShape {
    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("isolation.level", "read_committed");
        props.put("enable.auto.commit", "false");
        HexFormat hex = HexFormat.of();
        StringBuilder out = new StringBuilder();
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(args[1], Duration.ofSeconds(30))) {
                partitions.add(new TopicPartition(args[1], info.partition()));
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions, Duration.ofSeconds(30));
            long deadline = System.currentTimeMillis() + 60_000;
            while (partitions.stream().anyMatch(p -> consumer.position(p) < ends.get(p))) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("did not reach the end offsets " + ends + " within 60 s");
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    out.append(r.partition()).append('\t').append(r.offset()).append('\t')
                        .append(r.timestampType().name).append('\t').append(r.timestamp()).append('\t')
                        .append(r.key() == null ? "" : hex.formatHex(r.key()));
                    for (Header h : r.headers()) {
                        out.append('\t').append(h.key()).append('=').append(hex.formatHex(h.value()));
                    }
                    out.append('\n');
                }
            }
        }
        System.out.print(out);
    }
}
