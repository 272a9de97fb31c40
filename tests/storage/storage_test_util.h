#pragma once
// Helpers for driving a storage::Queue from a test: aligned buffers, temp files, and waiting for
// completions through event_fd() the way a reactor would (bounded in time).
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "storage/device.h"

namespace sens::storage::testing {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<uint8_t[], FreeDeleter>;

inline AlignedBuffer aligned_buffer(size_t size) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, size) != 0) return nullptr;
  return AlignedBuffer(static_cast<uint8_t*>(p));
}

// A file of `size` bytes (in /tmp unless told), removed at scope exit.
class TempFile {
 public:
  explicit TempFile(uint64_t size, const char* dir = "/tmp") {
    path_ = std::string(dir) + "/sens-storage-test-XXXXXX";
    int fd = mkstemp(path_.data());
    if (fd >= 0) {
      if (ftruncate(fd, off_t(size)) != 0) path_.clear();
      ::close(fd);
    } else {
      path_.clear();
    }
  }
  ~TempFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }
  std::string spec() const { return "file:" + path_; }

 private:
  std::string path_;
};

// A deterministic byte for (seed, position), so data written can be checked anywhere.
inline uint8_t pattern_byte(uint64_t seed, uint64_t position) {
  uint64_t x = (position + 1) * 0x9E3779B97F4A7C15ull ^ seed;
  x ^= x >> 29;
  return uint8_t(x);
}

inline void fill_pattern(uint8_t* buf, size_t len, uint64_t seed, uint64_t base) {
  for (size_t i = 0; i < len; ++i) buf[i] = pattern_byte(seed, base + i);
}

// Waits until `*done` reaches `target`, polling the queue's eventfd and reaping. False on
// timeout.
inline bool wait_for(Queue& queue, const int* done, int target, int timeout_ms = 5000) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (*done < target) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (queue.event_fd() >= 0) {
      pollfd pfd{queue.event_fd(), POLLIN, 0};
      ::poll(&pfd, 1, 100);
    }
    queue.reap();
  }
  return true;
}

inline void count_completion(Request* req) {
  ++*static_cast<int*>(req->user);
}

// Runs one request to completion; returns its result, or -ETIMEDOUT.
inline int run_one(Queue& queue, Request& req) {
  int done = 0;
  req.on_complete = count_completion;
  req.user = &done;
  queue.submit(&req);
  queue.kick();
  if (!wait_for(queue, &done, 1)) return -ETIMEDOUT;
  return req.result;
}

inline int run_io(Queue& queue, Op op, uint64_t offset, uint64_t length, void* buf,
                  bool fua = false) {
  Request req;
  req.op = op;
  req.offset = offset;
  req.length = length;
  req.buf = buf;
  req.fua = fua;
  return run_one(queue, req);
}

}  // namespace sens::storage::testing
