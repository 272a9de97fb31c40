/* The C interface the fio engine (sens_engine.c, compiled against fio's headers) calls: the host
 * library behind plain functions. A controller is shared by the jobs of one fio process that
 * name the same transport ID; each job thread has its own queue and poller. */
#ifndef SENS_FIO_H
#define SENS_FIO_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sens_fio_opts {
  const char* trid;
  unsigned nsid;     /* 0: the first active namespace */
  const char* share; /* none|lock|sendlist */
  unsigned connections;
  const char* coalesce; /* off|eager|uniform|semantic|adaptive */
  const char* poll;     /* off|adaptive|always */
  unsigned depth;       /* the job's iodepth */
  unsigned jobs;        /* numjobs: sizes a shared connection's cid space */
};

typedef struct sens_fio_queue sens_fio_queue;

/* The namespace's size and block size (a short connection of its own). 0, or -1 and *err. */
int sens_fio_probe(const struct sens_fio_opts* o, uint64_t* bytes, uint32_t* block_size, char* err,
                   size_t errlen);
/* A queue for the calling thread, on the process's controller for o->trid. NULL and *err. */
sens_fio_queue* sens_fio_queue_open(const struct sens_fio_opts* o, char* err, size_t errlen);
void sens_fio_queue_close(sens_fio_queue* q);
/* op: 0 read, 1 write, 2 flush, 3 deallocate. 0, -EAGAIN (full), -EINVAL, -ENODEV. */
int sens_fio_submit(sens_fio_queue* q, int op, uint64_t offset, uint64_t len, void* buf,
                    void* cookie);
/* Runs the queue's connections once, waiting up to timeout_ns for something to happen. */
void sens_fio_poll(sens_fio_queue* q, int64_t timeout_ns);
/* Takes up to max completed commands: their cookies and errno-style errors (0: success). */
unsigned sens_fio_reap(sens_fio_queue* q, void** cookies, int* errors, unsigned max);
/* One line of the queue's counters since it opened: I/Os completed, per I/O the epoll calls (by
 * outcome) of its thread, and its connection's counters: per I/O for a connection of its own
 * (share none), totals of every job on it for a shared one (read on the owner thread). */
void sens_fio_stats(sens_fio_queue* q, char* out, size_t len);

#ifdef __cplusplus
}
#endif
#endif
