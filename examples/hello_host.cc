// Writes a block over NVMe/TCP and reads it back: the README's example of the host library.
#include <sens/host.h>

#include <cstdio>
#include <cstring>

struct Pending {
  int left = 0;
  sens::Status status;
};

void done(void* ctx, const sens::Completion& c) {
  auto* p = static_cast<Pending*>(ctx);
  --p->left;
  if (!c.status.ok()) p->status = c.status;
}

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: %s TRID\n", argv[0]), 2;
  sens::ConnectResult r = sens::Controller::connect(argv[1]).get();
  if (!r.controller) return std::fprintf(stderr, "connect: %s\n", r.error.c_str()), 1;
  const sens::Namespace& ns = r.controller->namespaces().at(0);
  sens::Poller poller;  // drives this thread's I/O
  std::string error;
  auto q = r.controller->create_io_queue(&poller, 8, &error);
  if (!q) return std::fprintf(stderr, "queue: %s\n", error.c_str()), 1;

  static char out[4096], in[4096];
  std::snprintf(out, sizeof(out), "hello from namespace %u", ns.nsid);
  iovec wv{out, sizeof(out)}, rv{in, sizeof(in)};
  const uint32_t blocks = sizeof(out) / ns.block_size;
  Pending p;
  p.left = 1;
  q->write(ns.nsid, 0, blocks, &wv, 1, done, &p);
  while (p.left) poller.process_completions(0, 100'000'000);
  p.left = 1;
  q->read(ns.nsid, 0, blocks, &rv, 1, done, &p);
  while (p.left) poller.process_completions(0, 100'000'000);
  if (!p.status.ok()) return std::fprintf(stderr, "I/O: %s\n", p.status.to_string().c_str()), 1;
  std::printf("%s\n", std::memcmp(in, out, sizeof(in)) == 0 ? in : "read back other data");
  return std::memcmp(in, out, sizeof(in)) == 0 ? 0 : 1;
}
