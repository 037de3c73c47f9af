// kafkago_check: Debian's kafka-go (0.2.1: Produce v2 and Fetch v2, magic 1) against klog serve:
// write N messages, read them back with their timestamps. Usage: kafkago_check BOOTSTRAP TOPIC N.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

func main() {
	brokers, topic := []string{os.Args[1]}, os.Args[2]
	n, _ := strconv.Atoi(os.Args[3])
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	w := kafka.NewWriter(kafka.WriterConfig{Brokers: brokers, Topic: topic})
	for i := 0; i < n; i++ {
		if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%d", i))}); err != nil {
			fmt.Printf("error write: %v\n", err)
			os.Exit(1)
		}
	}
	w.Close()
	fmt.Println("ok write")
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: 0, MinBytes: 1, MaxBytes: 1 << 20})
	defer r.Close()
	for i := 0; i < n; i++ {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			fmt.Printf("error read: %v\n", err)
			os.Exit(1)
		}
		fmt.Printf("read %d %s %s %d\n", m.Offset, m.Key, m.Value, m.Time.UnixNano()/1e6)
	}
}
