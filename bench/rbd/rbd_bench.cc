// sens_rbd_bench: librbd's own rate on an image, the baseline bench/rbd.py holds a target on
// the same image against. Random I/O of --bs bytes at --qd in flight, from one thread, on
// librbd's asynchronous C API: completions come back from librbd's callback thread through a
// lock-free list and an eventfd, as in the target's RBD backend, and are resubmitted at once.
// Prints (and with --json writes) IOPS and mean latency.
#include <poll.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/units.h"
#include "tools/cli.h"

namespace {

struct Slot {
  rbd_completion_t c = nullptr;
  ssize_t result = 0;
  std::chrono::steady_clock::time_point start;
  std::vector<char> buf;
  Slot* next = nullptr;
};

std::atomic<Slot*> g_done{nullptr};
int g_efd = -1;

void on_done(rbd_completion_t c, void* arg) {
  auto* s = static_cast<Slot*>(arg);
  s->result = rbd_aio_get_return_value(c);
  rbd_aio_release(c);
  Slot* head = g_done.load(std::memory_order_relaxed);
  do {
    s->next = head;
  } while (
      !g_done.compare_exchange_weak(head, s, std::memory_order_release, std::memory_order_relaxed));
  if (head == nullptr) {
    uint64_t one = 1;
    (void)!::write(g_efd, &one, sizeof one);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sens_rbd_bench: librbd random I/O at a fixed queue depth"};
  std::string pool = "rbd", image, conf, id, rw = "randread", bs_text = "4k", size_text = "0",
              json_path;
  unsigned qd = 32;
  double time_s = 10, warmup_s = 1;
  app.add_option("--pool", pool)->capture_default_str();
  app.add_option("--image", image)->required();
  app.add_option("--conf", conf, "ceph.conf (default: librados' search, $CEPH_CONF)");
  app.add_option("--id", id, "cephx user without client.");
  app.add_option("--rw", rw, "randread|randwrite")->capture_default_str();
  app.add_option("--bs", bs_text)->capture_default_str();
  app.add_option("--qd", qd)->capture_default_str();
  app.add_option("--time", time_s, "measured seconds")->capture_default_str();
  app.add_option("--warmup", warmup_s)->capture_default_str();
  app.add_option("--size", size_text, "region exercised from offset 0 (0: the whole image)");
  app.add_option("--json", json_path);
  if (auto rc = sens::tools::parse_cli(app, argc, argv)) return *rc;
  auto bs = sens::parse_size(bs_text);
  auto region = sens::parse_size(size_text);
  bool write = rw == "randwrite";
  if (!bs || *bs == 0 || *bs % 512 || !region || qd == 0 || (!write && rw != "randread")) {
    std::fprintf(stderr, "bad --bs, --size, --qd or --rw\n");
    return 2;
  }
  rados_t cluster;
  rados_ioctx_t io;
  rbd_image_t img;
  int rc = rados_create(&cluster, id.empty() ? nullptr : id.c_str());
  if (rc == 0) rc = rados_conf_read_file(cluster, conf.empty() ? nullptr : conf.c_str());
  if (rc == 0) rc = rados_conf_set(cluster, "client_mount_timeout", "10");
  if (rc == 0) rc = rados_connect(cluster);
  if (rc == 0) rc = rados_ioctx_create(cluster, pool.c_str(), &io);
  if (rc == 0) rc = rbd_open(io, image.c_str(), &img, nullptr);
  if (rc < 0) {
    std::fprintf(stderr, "cannot open %s/%s: %s\n", pool.c_str(), image.c_str(),
                 std::strerror(-rc));
    return 1;
  }
  uint64_t size = 0;
  rbd_get_size(img, &size);
  if (*region && *region < size) size = *region;
  uint64_t blocks = size / *bs;
  g_efd = eventfd(0, EFD_CLOEXEC);
  std::vector<Slot> slots(qd);
  std::mt19937_64 rng(42);
  for (auto& s : slots) {
    s.buf.assign(*bs, 0);
    for (auto& b : s.buf) b = char(rng());
  }
  using Clock = std::chrono::steady_clock;
  auto submit = [&](Slot& s) {
    uint64_t off = (rng() % blocks) * *bs;
    s.start = Clock::now();
    rbd_aio_create_completion(&s, on_done, &s.c);
    int r = write ? rbd_aio_write(img, off, *bs, s.buf.data(), s.c)
                  : rbd_aio_read(img, off, *bs, s.buf.data(), s.c);
    if (r < 0) {
      std::fprintf(stderr, "submit: %s\n", std::strerror(-r));
      std::exit(1);
    }
  };
  for (auto& s : slots) submit(s);
  auto t0 = Clock::now();
  auto measure_start = t0 + std::chrono::duration<double>(warmup_s);
  auto end = measure_start + std::chrono::duration<double>(time_s);
  uint64_t ios = 0, errors = 0;
  double lat_sum_us = 0;
  bool measuring = false;
  unsigned inflight = qd;
  while (inflight > 0) {
    uint64_t count;
    (void)!::read(g_efd, &count, sizeof count);  // blocks until a completion was pushed
    Slot* list = g_done.exchange(nullptr, std::memory_order_acquire);
    auto now = Clock::now();
    if (!measuring && now >= measure_start) measuring = true;
    bool stop = now >= end;
    for (Slot* s = list; s != nullptr;) {
      Slot* next = s->next;
      --inflight;
      if (s->result < 0) ++errors;
      if (measuring && !stop) {
        ++ios;
        lat_sum_us += std::chrono::duration<double, std::micro>(now - s->start).count();
      }
      if (!stop) {
        submit(*s);
        ++inflight;
      }
      s = next;
    }
  }
  double iops = double(ios) / time_s;
  double lat = ios ? lat_sum_us / double(ios) : 0;
  std::printf("%s bs=%s qd=%u: %.0f IOPS, mean latency %.1f us, %llu errors\n", rw.c_str(),
              bs_text.c_str(), qd, iops, lat, static_cast<unsigned long long>(errors));
  if (!json_path.empty()) {
    nlohmann::json j = {{"rw", rw},
                        {"bs", *bs},
                        {"qd", qd},
                        {"iops", iops},
                        {"mean_latency_us", lat},
                        {"errors", errors},
                        {"seconds", time_s}};
    std::ofstream(json_path) << j.dump(2) << "\n";
  }
  rbd_close(img);
  rados_ioctx_destroy(io);
  rados_shutdown(cluster);
  return errors ? 1 : 0;
}
