package asynqimport_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/heraldhq/herald/asynqimport"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// BenchmarkRun imports batches of scheduled asynq tasks, copying them or
// moving them (one DeleteTask per task), and reports tasks per second.
func BenchmarkRun(b *testing.B) {
	const batch = 2000
	for _, move := range []bool{false, true} {
		b.Run(fmt.Sprintf("Move=%t", move), func(b *testing.B) {
			src := redistest.Start(b, redistest.Options{})
			cl := asynq.NewClient(asynq.RedisClientOpt{Addr: src.Addr})
			defer cl.Close()
			set, err := policy.Load("../configs/demo-policies.yaml")
			if err != nil {
				b.Fatal(err)
			}
			var tasks int
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				st, err := store.New(&store.Config{Client: server.Client(b), Namespace: redistest.Namespace(b), Shards: 16})
				if err != nil {
					b.Fatal(err)
				}
				queue := fmt.Sprintf("q%d", i)
				for j := range batch {
					task := asynq.NewTask("order:notify", []byte(`{"order":1}`))
					if _, err := cl.Enqueue(task, asynq.Queue(queue), asynq.TaskID(fmt.Sprintf("t%d", j)), asynq.ProcessIn(time.Hour)); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				sum, err := asynqimport.Run(context.Background(), &asynqimport.Config{
					Addr: src.Addr, Queue: queue, Move: move, Store: st, Policies: set,
					Map: map[string]asynqimport.Mapping{"order:notify": {Topic: "jobs"}},
				})
				if err != nil || sum.Imported != batch {
					b.Fatalf("imported %v of %d: %v", sum, batch, err)
				}
				tasks += batch
			}
			b.ReportMetric(float64(tasks)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
}
