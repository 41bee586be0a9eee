"""The Disque core: jobs, queues, replication, requeue, acks and their GC.

Read beside Disque's job.c, queue.c and ack.c."""
