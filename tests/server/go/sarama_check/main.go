// sarama_check: Debian's sarama (1.22) against klog serve, with sarama's default settings where it
// has them: a sync producer per codec, a partition consumer, a consumer group that commits, and
// the admin calls that failed with a bare EOF before (ListTopics, DescribeConfig, ListAcls).
// Usage: sarama_check BOOTSTRAP TOPIC. Prints one "ok ..." line per step; exits 1 on the first error.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/Shopify/sarama"
)

func fail(step string, err error) {
	fmt.Printf("error %s: %v\n", step, err)
	os.Exit(1)
}

type handler struct{ seen, want int; done chan struct{} }

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *handler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		s.MarkMessage(m, "")
		h.seen++
		if h.seen == h.want {
			close(h.done)
		}
	}
	return nil
}

func main() {
	brokers, topic := []string{os.Args[1]}, os.Args[2]
	codecs := map[string]sarama.CompressionCodec{"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
		"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4}
	sent := 0
	for _, name := range []string{"none", "gzip", "snappy", "lz4"} {
		cfg := sarama.NewConfig() // Version: sarama's default (Kafka 0.8.2: Produce v0, magic 0)
		cfg.Producer.Return.Successes = true
		cfg.Producer.Compression = codecs[name]
		cfg.Producer.Partitioner = sarama.NewManualPartitioner
		if name == "lz4" {
			cfg.Version = sarama.V0_10_0_0 // sarama refuses lz4 below (Produce v2, magic 1)
		}
		p, err := sarama.NewSyncProducer(brokers, cfg)
		if err != nil {
			fail("producer "+name, err)
		}
		for i := 0; i < 5; i++ {
			_, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: 0,
				Key: sarama.StringEncoder(fmt.Sprintf("k%d", sent)), Value: sarama.StringEncoder(fmt.Sprintf("%s-%d", name, i))})
			if err != nil {
				fail("send "+name, err)
			}
			sent++
		}
		p.Close()
		fmt.Printf("ok produce %s\n", name)
	}
	acfg := sarama.NewConfig()
	acfg.Producer.Return.Successes = true
	acfg.Version = sarama.V0_10_2_0 // the async producer with timestamps (Produce v2, magic 1)
	acfg.Producer.Partitioner = sarama.NewManualPartitioner
	ap, err := sarama.NewAsyncProducer(brokers, acfg)
	if err != nil {
		fail("async producer", err)
	}
	ap.Input() <- &sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.StringEncoder("async"), Timestamp: time.Now()}
	select {
	case <-ap.Successes():
		sent++
	case e := <-ap.Errors():
		fail("async send", e.Err)
	case <-time.After(20 * time.Second):
		fail("async send", fmt.Errorf("timed out"))
	}
	ap.Close()
	fmt.Println("ok produce async")

	c, err := sarama.NewConsumer(brokers, sarama.NewConfig())
	if err != nil {
		fail("consumer", err)
	}
	pc, err := c.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		fail("consume partition", err)
	}
	for i := 0; i < sent; i++ {
		select {
		case m := <-pc.Messages():
			if m.Offset != int64(i) {
				fail("consume", fmt.Errorf("offset %d at position %d", m.Offset, i))
			}
		case <-time.After(20 * time.Second):
			fail("consume", fmt.Errorf("timed out after %d of %d", i, sent))
		}
	}
	pc.Close()
	c.Close()
	fmt.Printf("ok consume %d\n", sent)

	gcfg := sarama.NewConfig()
	gcfg.Version = sarama.V0_10_2_0 // the lowest sarama's consumer groups take
	gcfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	group, err := sarama.NewConsumerGroup(brokers, "sarama-group", gcfg)
	if err != nil {
		fail("group", err)
	}
	h := &handler{want: sent, done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	go func() {
		for ctx.Err() == nil {
			if err := group.Consume(ctx, []string{topic}, h); err != nil && ctx.Err() == nil {
				fail("group consume", err)
			}
		}
	}()
	select {
	case <-h.done:
	case <-ctx.Done():
		fail("group", fmt.Errorf("saw %d of %d", h.seen, sent))
	}
	cancel()
	if err := group.Close(); err != nil { // commits what was marked
		fail("group close", err)
	}
	fmt.Printf("ok group %d\n", h.seen)

	admcfg := sarama.NewConfig()
	admcfg.Version = sarama.V1_0_0_0
	admin, err := sarama.NewClusterAdmin(brokers, admcfg)
	if err != nil {
		fail("admin", err)
	}
	topics, err := admin.ListTopics()
	if err != nil {
		fail("list topics", err)
	}
	if _, ok := topics[topic]; !ok {
		fail("list topics", fmt.Errorf("%s not listed", topic))
	}
	fmt.Println("ok list topics")
	if _, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic}); err != nil {
		fail("describe config", err)
	}
	fmt.Println("ok describe config")
	if _, err := admin.ListAcls(sarama.AclFilter{ResourceType: sarama.AclResourceAny, Operation: sarama.AclOperationAny,
		PermissionType: sarama.AclPermissionAny}); err != nil {
		fail("list acls", err)
	}
	fmt.Println("ok list acls")
	admin.Close()
}
