/* fio ioengine over the sens host library: fio --ioengine=external:PATH/libsens_fio.so
 * --sens_trid='trtype:tcp traddr:... trsvcid:... subnqn:...' [--sens_nsid=N]
 * [--sens_share=none|lock|sendlist --sens_connections=M] [--sens_coalesce=POLICY]
 * [--sens_poll=off|adaptive|always] [--sens_stats=1]. Built against the headers of the installed
 * fio's own source (make deps), whose FIO_IOOPS_VERSION fio checks when it loads the engine. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fio.h"
#include "optgroup.h"
#include "sens_fio.h"

struct sens_options {
  void* pad; /* fio keeps the thread_data pointer here */
  char* trid;
  unsigned int nsid;
  char* share;
  unsigned int connections;
  char* coalesce;
  char* poll;
  unsigned int stats;
};

static struct fio_option options[] = {
    {
        .name = "sens_trid",
        .lname = "sens transport ID",
        .type = FIO_OPT_STR_STORE,
        .off1 = offsetof(struct sens_options, trid),
        .help = "target: 'trtype:tcp traddr:ADDR trsvcid:PORT subnqn:NQN'",
        .category = FIO_OPT_C_ENGINE,
        .group = FIO_OPT_G_INVALID,
    },
    {
        .name = "sens_nsid",
        .lname = "sens namespace",
        .type = FIO_OPT_INT,
        .off1 = offsetof(struct sens_options, nsid),
        .def = "0",
        .help = "namespace id (0: the first active one)",
        .category = FIO_OPT_C_ENGINE,
        .group = FIO_OPT_G_INVALID,
    },
    {
        .name = "sens_share",
        .lname = "sens connection sharing",
        .type = FIO_OPT_STR_STORE,
        .off1 = offsetof(struct sens_options, share),
        .def = "none",
        .help = "none (a connection per job), lock or sendlist (jobs share sens_connections)",
        .category = FIO_OPT_C_ENGINE,
        .group = FIO_OPT_G_INVALID,
    },
    {
        .name = "sens_connections",
        .lname = "sens shared connections",
        .type = FIO_OPT_INT,
        .off1 = offsetof(struct sens_options, connections),
        .def = "1",
        .help = "connections the jobs of a process share (sens_share lock|sendlist, thread=1)",
        .category = FIO_OPT_C_ENGINE,
        .group = FIO_OPT_G_INVALID,
    },
    {
        .name = "sens_coalesce",
        .lname = "sens coalescing policy",
        .type = FIO_OPT_STR_STORE,
        .off1 = offsetof(struct sens_options, coalesce),
        .def = "adaptive",
        .help = "off|eager|uniform|semantic|adaptive",
        .category = FIO_OPT_C_ENGINE,
        .group = FIO_OPT_G_INVALID,
    },
    {
        .name = "sens_poll",
        .lname = "sens polling",
        .type = FIO_OPT_STR_STORE,
        .off1 = offsetof(struct sens_options, poll),
        .def = "adaptive",
        .help = "off|adaptive|always",
        .category = FIO_OPT_C_ENGINE,
        .group = FIO_OPT_G_INVALID,
    },
    {
        .name = "sens_stats",
        .lname = "sens transport counters",
        .type = FIO_OPT_BOOL,
        .off1 = offsetof(struct sens_options, stats),
        .def = "0",
        .help = "print each job's syscalls, polls and PDUs per flush per I/O when it ends",
        .category = FIO_OPT_C_ENGINE,
        .group = FIO_OPT_G_INVALID,
    },
    {
        .name = NULL,
    },
};

struct sens_data {
  sens_fio_queue* q;
  struct io_u** events;
  void** cookies;
  int* errors;
  struct io_u** unsent; /* queued since the last poller pass, which sends them */
  unsigned int nunsent;
};

static void fill_opts(struct thread_data* td, struct sens_fio_opts* o) {
  struct sens_options* so = td->eo;
  memset(o, 0, sizeof(*o));
  o->trid = so->trid;
  o->nsid = so->nsid;
  o->share = so->share;
  o->connections = so->connections;
  o->coalesce = so->coalesce;
  o->poll = so->poll;
  o->depth = td->o.iodepth;
  o->jobs = thread_number; /* every job of this fio process (clones included) */
}

static int sens_setup(struct thread_data* td) {
  struct sens_fio_opts o;
  char err[512];
  uint64_t bytes = 0;
  uint32_t bs = 0;
  fill_opts(td, &o);
  if (!o.trid) {
    log_err("fio: sens: sens_trid is required\n");
    return 1;
  }
  /* One file standing for the namespace (as engines/rbd.c and nbd.c do). */
  if (!td->files_index) {
    add_file(td, "sens", 0, 0);
    td->o.nr_files = td->o.nr_files ?: 1;
    td->o.open_files++;
  }
  if (sens_fio_probe(&o, &bytes, &bs, err, sizeof(err)) != 0) {
    log_err("fio: sens: %s\n", err);
    return 1;
  }
  td->files[0]->real_file_size = bytes;
  return 0;
}

static void sens_cleanup(struct thread_data* td);

static int sens_init(struct thread_data* td) {
  struct sens_fio_opts o;
  char err[512];
  struct sens_data* d = calloc(1, sizeof(*d));
  if (!d) return 1;
  fill_opts(td, &o);
  d->q = sens_fio_queue_open(&o, err, sizeof(err));
  if (!d->q) {
    log_err("fio: sens: %s\n", err);
    free(d);
    return 1;
  }
  d->events = calloc(td->o.iodepth, sizeof(*d->events));
  d->cookies = calloc(td->o.iodepth, sizeof(*d->cookies));
  d->errors = calloc(td->o.iodepth, sizeof(*d->errors));
  d->unsent = calloc(td->o.iodepth, sizeof(*d->unsent));
  td->io_ops_data = d;
  if (!d->events || !d->cookies || !d->errors || !d->unsent) {
    log_err("fio: sens: out of memory\n");
    sens_cleanup(td);
    return 1;
  }
  return 0;
}

static void sens_cleanup(struct thread_data* td) {
  struct sens_data* d = td->io_ops_data;
  if (!d) return;
  if (((struct sens_options*)td->eo)->stats) {
    char line[512];
    sens_fio_stats(d->q, line, sizeof(line));
    log_info("fio: sens: %s: %s\n", td->o.name, line);
  }
  sens_fio_queue_close(d->q);
  free(d->events);
  free(d->cookies);
  free(d->errors);
  free(d->unsent);
  free(d);
  td->io_ops_data = NULL;
}

/* Just before the pass that sends them: what fio expects of an engine with a commit hook (the
 * submission latency sample, the submit histogram), with one clock read for the whole batch
 * as fio's io_uring and libaio engines take it (FIO_ASYNCIO_SETS_ISSUE_TIME). */
static void mark_sent(struct thread_data* td, struct sens_data* d) {
  unsigned int i;
  if (!d->nunsent) return;
  if (fio_fill_issue_time(td)) {
    struct timespec now;
    fio_gettime(&now, NULL);
    for (i = 0; i < d->nunsent; ++i) {
      d->unsent[i]->issue_time = now;
      io_u_queued(td, d->unsent[i]);
    }
  }
  io_u_mark_submit(td, d->nunsent);
  d->nunsent = 0;
}

static enum fio_q_status sens_queue(struct thread_data* td, struct io_u* io_u) {
  struct sens_data* d = td->io_ops_data;
  int op, rc;
  fio_ro_check(td, io_u);
  switch (io_u->ddir) {
    case DDIR_READ:
      op = 0;
      break;
    case DDIR_WRITE:
      op = 1;
      break;
    case DDIR_SYNC:
    case DDIR_DATASYNC:
      op = 2;
      break;
    case DDIR_TRIM:
      op = 3;
      break;
    default:
      io_u->error = EINVAL;
      return FIO_Q_COMPLETED;
  }
  rc = sens_fio_submit(d->q, op, io_u->offset, io_u->xfer_buflen, io_u->xfer_buf, io_u);
  if (rc == -EAGAIN) return FIO_Q_BUSY;
  if (rc != 0) {
    io_u->error = -rc;
    return FIO_Q_COMPLETED;
  }
  /* fio keeps at most iodepth io_us queued; should it ever queue more before a pass, the
   * batch so far is stamped now rather than an io_u left without its slat sample. */
  if (d->nunsent == td->o.iodepth) mark_sent(td, d);
  d->unsent[d->nunsent++] = io_u;
  return FIO_Q_QUEUED;
}

static int sens_commit(struct thread_data* td) {
  /* Nothing here: what was queued leaves with the next poller pass, which getevents runs (a
   * pass per commit would cost a poll syscall per I/O, fio committing one io_u at a time). */
  (void)td;
  return 0;
}

static int sens_getevents(struct thread_data* td, unsigned int min, unsigned int max,
                          const struct timespec* t) {
  struct sens_data* d = td->io_ops_data;
  unsigned int n = 0, i, got;
  int passes = 0;
  if (max > td->o.iodepth) max = td->o.iodepth;
  for (;;) {
    got = sens_fio_reap(d->q, d->cookies + n, d->errors + n, max - n);
    for (i = n; i < n + got; ++i) {
      struct io_u* u = d->cookies[i];
      u->error = d->errors[i];
      u->resid = u->error ? u->xfer_buflen : 0;
      d->events[i] = u;
    }
    n += got;
    if (n >= max || (n >= min && passes > 0)) break;
    /* Sends what fio queued since the last pass and receives; waits up to 1 ms when nothing
     * is ready (hybrid polling spins first), never when fio asked for no minimum. */
    mark_sent(td, d);
    sens_fio_poll(d->q, n >= min ? 0 : 1000000);
    ++passes;
  }
  (void)t;
  return (int)n;
}

static struct io_u* sens_event(struct thread_data* td, int event) {
  return ((struct sens_data*)td->io_ops_data)->events[event];
}

static int sens_open_file(struct thread_data* td, struct fio_file* f) {
  (void)td;
  (void)f;
  return 0;
}

static int sens_invalidate(struct thread_data* td, struct fio_file* f) {
  (void)td;
  (void)f;
  return 0;
}

struct ioengine_ops ioengine = {
    .name = "sens",
    .version = FIO_IOOPS_VERSION,
    .options = options,
    .option_struct_size = sizeof(struct sens_options),
    .flags = FIO_DISKLESSIO | FIO_NOEXTEND | FIO_NODISKUTIL | FIO_ASYNCIO_SETS_ISSUE_TIME,
    .setup = sens_setup,
    .init = sens_init,
    .cleanup = sens_cleanup,
    .queue = sens_queue,
    .commit = sens_commit,
    .getevents = sens_getevents,
    .event = sens_event,
    .open_file = sens_open_file,
    .invalidate = sens_invalidate,
};
