// What a JVM consumer of an Avro topic decodes: `java -cp 'dev/kafka/lib/*:dev/registry/target/registry-runner.jar'
// JavaAvro.java BOOTSTRAP TOPIC REGISTRY_URL` reads every committed message (read_committed) with kafka-clients'
// KafkaConsumer, takes the value's wire format apart as the registry's deserializers do (magic byte 0, a 4-byte
// big-endian schema id, then Avro binary), fetches each schema once from the registry's Confluent API
// (GET /schemas/ids/{id}) and decodes the value with Apache Avro's GenericDatumReader. One tab-separated line per
// message: partition, timestamp, the key in hex, the schema id, the record as Avro's JSON text.
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.DecoderFactory;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class JavaAvro {
    private static final HttpClient HTTP = HttpClient.newHttpClient();
    private static final ObjectMapper JSON = new ObjectMapper();

    static Schema fetch(String registry, int id) throws Exception {
        HttpRequest request = HttpRequest.newBuilder(URI.create(registry + "/schemas/ids/" + id)).build();
        HttpResponse<String> response = HTTP.send(request, HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() != 200) {
            throw new IllegalStateException("schema id " + id + ": HTTP " + response.statusCode() + " " + response.body());
        }
        return new Schema.Parser().parse(JSON.readTree(response.body()).get("schema").asText());
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("isolation.level", "read_committed");
        props.put("enable.auto.commit", "false");
        HexFormat hex = HexFormat.of();
        Map<Integer, Schema> schemas = new HashMap<>();
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
                    ByteBuffer value = ByteBuffer.wrap(r.value());
                    if (value.get() != 0) {
                        throw new IllegalStateException("offset " + r.offset() + ": no magic byte 0");
                    }
                    int id = value.getInt();
                    Schema schema = schemas.get(id);
                    if (schema == null) {
                        schema = fetch(args[2], id);
                        schemas.put(id, schema);
                    }
                    GenericRecord record = new GenericDatumReader<GenericRecord>(schema).read(null,
                        DecoderFactory.get().binaryDecoder(r.value(), 5, r.value().length - 5, null));
                    out.append(r.partition()).append('\t').append(r.timestamp()).append('\t')
                        .append(hex.formatHex(r.key())).append('\t').append(id).append('\t')
                        .append(GenericData.get().toString(record)).append('\n');
                }
            }
        }
        System.out.print(out);
    }
}
