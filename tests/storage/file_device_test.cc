// The file backend: O_DIRECT through io_uring on a real temp file in /tmp.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/falloc.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "storage/device.h"
#include "storage_test_util.h"

namespace sens::storage {
namespace {

using testing::aligned_buffer;
using testing::fill_pattern;
using testing::pattern_byte;
using testing::run_io;
using testing::TempFile;

constexpr uint64_t kFileSize = 16ull << 20;

std::unique_ptr<Device> open_or_fail(const std::string& spec, bool read_only = false) {
  std::string error;
  auto dev = Device::open(spec, &error, read_only);
  EXPECT_NE(dev, nullptr) << error;
  return dev;
}

// Reads the file back with plain read(), past any cache the device had.
std::vector<uint8_t> read_whole_file(const std::string& path) {
  std::vector<uint8_t> data;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return data;
  struct stat st;
  fstat(fd, &st);
  data.resize(size_t(st.st_size));
  size_t got = 0;
  while (got < data.size()) {
    ssize_t n = ::read(fd, data.data() + got, data.size() - got);
    if (n <= 0) break;
    got += size_t(n);
  }
  data.resize(got);
  ::close(fd);
  return data;
}

TEST(FileDevice, OpenSizeDescribe) {
  TempFile file(kFileSize + 1000);  // a partial last block is not addressable
  auto dev = open_or_fail(file.spec());
  ASSERT_NE(dev, nullptr);
  EXPECT_EQ(dev->size(), kFileSize);
  EXPECT_EQ(dev->block_size(), 4096u);
  EXPECT_TRUE(dev->volatile_cache());
  EXPECT_TRUE(dev->discard_zeroes());  // a punched hole reads as zeroes
  EXPECT_EQ(dev->describe(), "file " + file.path() + " (16 MiB, 4096 B blocks)");
  EXPECT_EQ(dev->mapped(0, 4096), nullptr);  // reads go through the queue
  auto q = dev->make_queue(8);
  EXPECT_GE(q->event_fd(), 0);
  EXPECT_EQ(q->inflight(), 0u);

  auto ro = open_or_fail(file.spec(), true);
  ASSERT_NE(ro, nullptr);
  EXPECT_TRUE(ro->read_only());
  EXPECT_NE(ro->describe().find("read-only"), std::string::npos);
}

TEST(FileDevice, WriteReadRoundtripAndContentsAfterClose) {
  TempFile file(kFileSize);
  auto buf = aligned_buffer(1 << 20);
  {
    auto dev = open_or_fail(file.spec());
    ASSERT_NE(dev, nullptr);
    auto q = dev->make_queue(4);
    fill_pattern(buf.get(), 1 << 20, 11, 0);
    ASSERT_EQ(run_io(*q, Op::kWrite, 0, 1 << 20, buf.get()), 0);
    fill_pattern(buf.get(), 4096, 11, kFileSize - 4096);
    ASSERT_EQ(run_io(*q, Op::kWrite, kFileSize - 4096, 4096, buf.get()), 0);
    fill_pattern(buf.get(), 8192, 11, 5 << 20);
    ASSERT_EQ(run_io(*q, Op::kWrite, 5 << 20, 8192, buf.get(), /*fua=*/true), 0);

    std::memset(buf.get(), 0xee, 1 << 20);
    ASSERT_EQ(run_io(*q, Op::kRead, 0, 1 << 20, buf.get()), 0);
    for (uint32_t i = 0; i < (1u << 20); ++i) ASSERT_EQ(buf[i], pattern_byte(11, i)) << i;
    ASSERT_EQ(run_io(*q, Op::kRead, 5 << 20, 8192, buf.get()), 0);
    for (uint32_t i = 0; i < 8192; ++i) ASSERT_EQ(buf[i], pattern_byte(11, (5 << 20) + i)) << i;
    Request flush;
    flush.op = Op::kFlush;
    EXPECT_EQ(testing::run_one(*q, flush), 0);
    EXPECT_EQ(dev->sync(), 0);
  }
  std::vector<uint8_t> data = read_whole_file(file.path());
  ASSERT_EQ(data.size(), kFileSize);
  for (uint64_t i = 0; i < (1u << 20); ++i) ASSERT_EQ(data[i], pattern_byte(11, i)) << i;
  for (uint64_t i = 5 << 20; i < (5 << 20) + 8192; ++i) ASSERT_EQ(data[i], pattern_byte(11, i));
  for (uint64_t i = kFileSize - 4096; i < kFileSize; ++i) ASSERT_EQ(data[i], pattern_byte(11, i));
  for (uint64_t i = 2 << 20; i < (3 << 20); ++i) ASSERT_EQ(data[i], 0) << i;  // never written
}

TEST(FileDevice, RefusesBadRequests) {
  TempFile file(kFileSize);
  auto dev = open_or_fail(file.spec());
  ASSERT_NE(dev, nullptr);
  auto q = dev->make_queue(2);
  auto buf = aligned_buffer(8192);
  EXPECT_EQ(run_io(*q, Op::kRead, 512, 4096, buf.get()), -EINVAL);  // not a whole 4 KiB block
  EXPECT_EQ(run_io(*q, Op::kRead, 0, 512, buf.get()), -EINVAL);
  EXPECT_EQ(run_io(*q, Op::kRead, kFileSize, 4096, buf.get()), -EINVAL);
  EXPECT_EQ(q->inflight(), 0u);

  auto ro = open_or_fail(file.spec(), true);
  auto rq = ro->make_queue(2);
  EXPECT_EQ(run_io(*rq, Op::kWrite, 0, 4096, buf.get()), -EROFS);
  EXPECT_EQ(run_io(*rq, Op::kRead, 0, 4096, buf.get()), 0);
}

// Past the queue's depth, requests wait for room instead of failing; they start as earlier
// ones complete, in the order they came.
TEST(FileDevice, WaitsPastDepth) {
  TempFile file(kFileSize);
  auto dev = open_or_fail(file.spec());
  ASSERT_NE(dev, nullptr);
  auto q = dev->make_queue(2);
  auto buf = aligned_buffer(3 * 4096);
  int done = 0;
  Request reqs[3];
  for (int i = 0; i < 3; ++i) {
    reqs[i].op = Op::kRead;
    reqs[i].offset = uint64_t(i) * 4096;
    reqs[i].length = 4096;
    reqs[i].buf = buf.get() + i * 4096;
    reqs[i].on_complete = testing::count_completion;
    reqs[i].user = &done;
    reqs[i].result = 1;
    q->submit(&reqs[i]);
  }
  EXPECT_EQ(done, 0);  // nobody refused inline
  EXPECT_EQ(q->inflight(), 3u);
  EXPECT_EQ(q->waited(), 1u);
  q->kick();
  ASSERT_TRUE(testing::wait_for(*q, &done, 3));
  for (const auto& r : reqs) EXPECT_EQ(r.result, 0);
  EXPECT_EQ(q->inflight(), 0u);
  EXPECT_EQ(q->waited(), 1u);
}

// 2,000 mixed reads and writes submitted at once to a queue 8 deep, with one kick: every one
// completes with 0 and the data is right, the writes' on the file and the reads' in memory.
TEST(FileDevice, ThousandsOfRequestsThroughASmallQueue) {
  TempFile file(kFileSize);
  auto dev = open_or_fail(file.spec());
  ASSERT_NE(dev, nullptr);
  constexpr int kRequests = 2000;
  constexpr uint32_t kBlock = 4096;
  constexpr uint64_t kWriteBase = 1024 * kBlock;  // reads from [0, 4 MiB), writes past it
  {
    auto q = dev->make_queue(8);
    auto seed = aligned_buffer(kRequests * kBlock);
    fill_pattern(seed.get(), kRequests * kBlock, 21, 0);
    ASSERT_EQ(run_io(*q, Op::kWrite, 0, 1024 * kBlock, seed.get()), 0);

    auto bufs = aligned_buffer(kRequests * kBlock);
    std::vector<Request> reqs(kRequests);
    int done = 0;
    for (int i = 0; i < kRequests; ++i) {
      Request& r = reqs[i];
      uint8_t* b = bufs.get() + uint64_t(i) * kBlock;
      if (i % 2 == 0) {  // a write of its own block
        r.op = Op::kWrite;
        r.offset = kWriteBase + uint64_t(i) * kBlock;
        fill_pattern(b, kBlock, 22, r.offset);
        r.fua = i % 10 == 0;
      } else {  // a read of one of the blocks written first
        r.op = Op::kRead;
        r.offset = uint64_t(i % 1024) * kBlock;
        std::memset(b, 0xee, kBlock);
      }
      r.length = kBlock;
      r.buf = b;
      r.on_complete = testing::count_completion;
      r.user = &done;
      r.result = 1;
      q->submit(&r);
    }
    EXPECT_EQ(done, 0);
    EXPECT_EQ(q->inflight(), unsigned(kRequests));
    EXPECT_EQ(q->waited(), uint64_t(kRequests - 8));
    q->kick();
    ASSERT_TRUE(testing::wait_for(*q, &done, kRequests, 30000));
    EXPECT_EQ(q->inflight(), 0u);
    for (int i = 0; i < kRequests; ++i) {
      ASSERT_EQ(reqs[i].result, 0) << "request " << i;
      if (i % 2 == 1) {
        const uint8_t* b = bufs.get() + uint64_t(i) * kBlock;
        for (uint32_t j = 0; j < kBlock; j += 61)
          ASSERT_EQ(b[j], pattern_byte(21, reqs[i].offset + j)) << i << "/" << j;
      }
    }
  }
  dev.reset();
  std::vector<uint8_t> data = read_whole_file(file.path());
  ASSERT_EQ(data.size(), kFileSize);
  for (int i = 0; i < kRequests; i += 2) {
    uint64_t offset = kWriteBase + uint64_t(i) * kBlock;
    for (uint64_t j = offset; j < offset + kBlock; j += 31)
      ASSERT_EQ(data[j], pattern_byte(22, j)) << "write " << i;
  }
}

// Waiting requests start in the order they were submitted: with one request in the device at a
// time, each read sees the write submitted just before it.
TEST(FileDevice, WaitingRequestsKeepTheirOrder) {
  TempFile file(kFileSize);
  auto dev = open_or_fail(file.spec());
  ASSERT_NE(dev, nullptr);
  auto q = dev->make_queue(1);
  constexpr int kRounds = 16;
  constexpr uint32_t kBlock = 4096;
  auto bufs = aligned_buffer(2 * kRounds * kBlock);
  std::vector<Request> reqs(2 * kRounds);
  int done = 0;
  for (int i = 0; i < 2 * kRounds; ++i) {
    Request& r = reqs[i];
    r.op = i % 2 == 0 ? Op::kWrite : Op::kRead;
    r.offset = 8 * kBlock;  // all on the same block
    r.length = kBlock;
    r.buf = bufs.get() + uint64_t(i) * kBlock;
    if (i % 2 == 0) fill_pattern(bufs.get() + uint64_t(i) * kBlock, kBlock, 100 + i, 0);
    r.on_complete = testing::count_completion;
    r.user = &done;
    q->submit(&r);
  }
  EXPECT_EQ(q->waited(), uint64_t(2 * kRounds - 1));
  q->kick();
  ASSERT_TRUE(testing::wait_for(*q, &done, 2 * kRounds));
  for (int i = 1; i < 2 * kRounds; i += 2) {
    ASSERT_EQ(reqs[i].result, 0);
    const uint8_t* b = bufs.get() + uint64_t(i) * kBlock;
    for (uint32_t j = 0; j < kBlock; j += 17)
      ASSERT_EQ(b[j], pattern_byte(100 + i - 1, j)) << "read " << i << " byte " << j;
  }
}

// A request submitted from a completion callback is started by the same reap(), and a queue
// with requests still owed can be destroyed (it waits for the kernel and calls nobody).
TEST(FileDevice, SubmitFromCompletionAndDestroyWithWaiting) {
  TempFile file(kFileSize);
  auto dev = open_or_fail(file.spec());
  ASSERT_NE(dev, nullptr);
  auto q = dev->make_queue(2);
  auto buf = aligned_buffer(4096);
  struct Chain {
    Queue* q;
    Request next;
    int done = 0;
  } chain{q.get(), {}, 0};
  chain.next.op = Op::kRead;
  chain.next.offset = 4096;
  chain.next.length = 4096;
  chain.next.buf = buf.get();
  chain.next.on_complete = testing::count_completion;
  chain.next.user = &chain.done;
  Request first;
  first.op = Op::kRead;
  first.length = 4096;
  first.buf = buf.get();
  first.user = &chain;
  first.on_complete = [](Request* r) {
    auto* c = static_cast<Chain*>(r->user);
    c->q->submit(&c->next);
  };
  q->submit(&first);
  q->kick();
  ASSERT_TRUE(testing::wait_for(*q, &chain.done, 1));
  EXPECT_EQ(first.result, 0);
  EXPECT_EQ(chain.next.result, 0);

  Request many[6];
  for (auto& r : many) {
    r.op = Op::kRead;
    r.length = 4096;
    r.buf = buf.get();
    q->submit(&r);
  }
  EXPECT_EQ(q->inflight(), 6u);
  q->kick();
  q.reset();  // two in the kernel, four waiting: must not hang or crash
}

// 64 requests prepared, one kick, completions found through the eventfd and reaped.
TEST(FileDevice, BatchOf64WithOneKick) {
  TempFile file(kFileSize);
  auto dev = open_or_fail(file.spec());
  ASSERT_NE(dev, nullptr);
  constexpr int kBatch = 64;
  constexpr uint32_t kLen = 16384;
  auto q = dev->make_queue(kBatch);
  auto buf = aligned_buffer(kBatch * kLen);
  int done = 0;
  std::vector<Request> reqs(kBatch);
  auto submit_all = [&](Op op) {
    done = 0;
    for (int i = 0; i < kBatch; ++i) {
      Request& r = reqs[i];
      r = Request();
      r.op = op;
      r.offset = uint64_t(i) * 2 * kLen;  // every other extent: gaps stay zero
      r.length = kLen;
      r.buf = buf.get() + i * kLen;
      r.on_complete = testing::count_completion;
      r.user = &done;
      r.result = 1;
      q->submit(&r);
    }
  };
  fill_pattern(buf.get(), kBatch * kLen, 3, 0);
  submit_all(Op::kWrite);
  EXPECT_EQ(q->inflight(), unsigned(kBatch));
  EXPECT_EQ(done, 0);  // nothing completes before the kick
  q->kick();
  // Completion arrives through the eventfd.
  pollfd pfd{q->event_fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1);
  ASSERT_TRUE(testing::wait_for(*q, &done, kBatch));
  for (auto& r : reqs) EXPECT_EQ(r.result, 0);
  EXPECT_EQ(q->inflight(), 0u);
  EXPECT_FALSE(q->ready());

  std::memset(buf.get(), 0, kBatch * kLen);
  submit_all(Op::kRead);
  q->kick();
  ASSERT_TRUE(testing::wait_for(*q, &done, kBatch));
  for (int i = 0; i < kBatch; ++i) {
    ASSERT_EQ(reqs[i].result, 0);
    for (uint32_t j = 0; j < kLen; j += 97)
      ASSERT_EQ(buf[i * kLen + j], pattern_byte(3, uint64_t(i) * kLen + j)) << i << "/" << j;
  }
  // With nothing owed, the eventfd goes quiet: a reap finds nothing and nothing signals
  // again. (The last reap may have read the eventfd before the kernel signalled the final
  // completions it then drained, so one late signal can remain: a reactor's spurious wake-up.)
  for (int i = 0; i < 100; ++i) {
    pfd.revents = 0;
    if (::poll(&pfd, 1, 0) == 0) break;
    EXPECT_EQ(q->reap(), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  pfd.revents = 0;
  EXPECT_EQ(::poll(&pfd, 1, 0), 0) << "the eventfd keeps signalling with nothing owed";
  EXPECT_EQ(done, kBatch) << "a request completed twice";
}

void check_file_zeroing(Op op, bool fua = false) {
  TempFile file(kFileSize);
  auto dev = open_or_fail(file.spec());
  ASSERT_NE(dev, nullptr);
  auto q = dev->make_queue(4);
  constexpr uint32_t kRegion = 256 * 1024;
  auto buf = aligned_buffer(kRegion);
  std::memset(buf.get(), 0xab, kRegion);
  ASSERT_EQ(run_io(*q, Op::kWrite, 0, kRegion, buf.get()), 0);
  ASSERT_EQ(run_io(*q, op, 3 * 4096, 20 * 4096, nullptr, fua), 0);
  std::memset(buf.get(), 0x11, kRegion);
  ASSERT_EQ(run_io(*q, Op::kRead, 0, kRegion, buf.get()), 0);
  for (uint32_t i = 0; i < kRegion; ++i) {
    bool inside = i >= 3 * 4096 && i < 23 * 4096;
    ASSERT_EQ(buf[i], inside ? 0 : 0xab) << "byte " << i;
  }
  EXPECT_EQ(q->inflight(), 0u);
  EXPECT_EQ(dev->sync(), 0);
  q.reset();
  dev.reset();
  std::vector<uint8_t> data = read_whole_file(file.path());
  ASSERT_EQ(data.size(), kFileSize);  // KEEP_SIZE: the file does not shrink
  for (uint32_t i = 0; i < kRegion; ++i)
    ASSERT_EQ(data[i], (i >= 3 * 4096 && i < 23 * 4096) ? 0 : 0xab) << i;
}

TEST(FileDevice, WriteZeroesClearsRangeOnly) {
  check_file_zeroing(Op::kWriteZeroes);
}
TEST(FileDevice, DiscardClearsRangeOnly) {
  check_file_zeroing(Op::kDiscard);
}
// FUA Write Zeroes: the fallocate is followed by an fdatasync before completion.
TEST(FileDevice, WriteZeroesWithFuaClearsRangeOnly) {
  check_file_zeroing(Op::kWriteZeroes, /*fua=*/true);
}

// tmpfs cannot zero a range (FALLOC_FL_ZERO_RANGE is EOPNOTSUPP there), so write zeroes falls
// back to writing the zero region, in several steps for a range larger than it.
TEST(FileDevice, WriteZeroesFallsBackToWritingZeroes) {
  struct stat st;
  if (::stat("/dev/shm", &st) != 0 || !S_ISDIR(st.st_mode)) GTEST_SKIP() << "no /dev/shm";
  constexpr uint64_t kSize = 8 << 20;
  TempFile file(kSize, "/dev/shm");
  ASSERT_FALSE(file.path().empty());
  int probe = ::open(file.path().c_str(), O_RDWR);
  ASSERT_GE(probe, 0);
  bool refuses = fallocate(probe, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 0, 4096) != 0;
  ::close(probe);
  if (!refuses) GTEST_SKIP() << "this /dev/shm zeroes ranges itself: no fallback to test";
  auto dev = open_or_fail(file.spec());
  ASSERT_NE(dev, nullptr);
  auto q = dev->make_queue(2);
  auto buf = aligned_buffer(kSize);
  std::memset(buf.get(), 0xcd, kSize);
  ASSERT_EQ(run_io(*q, Op::kWrite, 0, uint32_t(kSize), buf.get()), 0);
  const uint64_t zero_offset = 4096, zero_length = (5 << 20) + 8192;  // three zero-region steps
  ASSERT_EQ(run_io(*q, Op::kWriteZeroes, zero_offset, zero_length, nullptr), 0);
  // With FUA the zero-region writes are RWF_DSYNC.
  const uint64_t fua_offset = 7 << 20, fua_length = 12288;
  ASSERT_EQ(run_io(*q, Op::kWriteZeroes, fua_offset, fua_length, nullptr, /*fua=*/true), 0);
  std::memset(buf.get(), 0x11, kSize);
  ASSERT_EQ(run_io(*q, Op::kRead, 0, uint32_t(kSize), buf.get()), 0);
  for (uint64_t i = 0; i < kSize; ++i) {
    bool inside = (i >= zero_offset && i < zero_offset + zero_length) ||
                  (i >= fua_offset && i < fua_offset + fua_length);
    ASSERT_EQ(buf[i], inside ? 0 : 0xcd) << "byte " << i;
  }
}

// Zeroing and discarding more than 4 GiB of a sparse 8 GiB file clear the whole range (a
// Dataset Management range may cover 2^32 blocks), not its length modulo 4 GiB.
void check_file_zeroing_past_4gib(Op op) {
  constexpr uint64_t kGiB = 1ull << 30;
  TempFile file(8 * kGiB);
  ASSERT_FALSE(file.path().empty());
  if (op == Op::kWriteZeroes) {  // ZERO_RANGE allocates the range (as unwritten extents)
    struct statvfs vfs;
    ASSERT_EQ(statvfs(file.path().c_str(), &vfs), 0);
    if (uint64_t(vfs.f_bavail) * vfs.f_frsize < 16 * kGiB)
      GTEST_SKIP() << "less than 16 GiB free for zeroing 5 GiB of a file";
  }
  auto dev = open_or_fail(file.spec());
  ASSERT_NE(dev, nullptr);
  auto q = dev->make_queue(4);
  auto buf = aligned_buffer(4096);
  const uint64_t marks[] = {0, 4 * kGiB + kGiB / 2, 5 * kGiB - 4096, 5 * kGiB};
  for (uint64_t at : marks) {
    std::memset(buf.get(), 0xab, 4096);
    ASSERT_EQ(run_io(*q, Op::kWrite, at, 4096, buf.get()), 0) << at;
  }
  ASSERT_EQ(run_io(*q, op, 0, 5 * kGiB, nullptr), 0);
  for (uint64_t at : marks) {
    std::memset(buf.get(), 0x11, 4096);
    ASSERT_EQ(run_io(*q, Op::kRead, at, 4096, buf.get()), 0);
    uint8_t want = at < 5 * kGiB ? 0 : 0xab;  // the block just past the range is untouched
    for (int i = 0; i < 4096; ++i) ASSERT_EQ(buf[i], want) << "at " << at << " byte " << i;
  }
  struct stat st;
  ASSERT_EQ(::stat(file.path().c_str(), &st), 0);
  EXPECT_EQ(uint64_t(st.st_size), 8 * kGiB);  // KEEP_SIZE
}

TEST(FileDevice, DiscardPast4GiB) {
  check_file_zeroing_past_4gib(Op::kDiscard);
}
TEST(FileDevice, WriteZeroesPast4GiB) {
  check_file_zeroing_past_4gib(Op::kWriteZeroes);
}

// A read that runs into the end of a file that shrank underneath must fail, not return a
// silently short buffer.
TEST(FileDevice, ShortReadIsAnError) {
  TempFile file(1 << 20);
  auto dev = open_or_fail(file.spec());
  ASSERT_NE(dev, nullptr);
  ASSERT_EQ(::truncate(file.path().c_str(), 512 * 1024), 0);
  auto q = dev->make_queue(2);
  auto buf = aligned_buffer(512 * 1024);
  EXPECT_EQ(run_io(*q, Op::kRead, 256 * 1024, 512 * 1024, buf.get()), -EIO);
  EXPECT_EQ(run_io(*q, Op::kRead, 0, 256 * 1024, buf.get()), 0);
  EXPECT_EQ(q->inflight(), 0u);
}

// Each thread drives the shared device through its own queue (its own ring), no lock.
TEST(FileDevice, QueuePerThread) {
  TempFile file(kFileSize);
  auto dev = open_or_fail(file.spec());
  ASSERT_NE(dev, nullptr);
  auto worker = [&](int index, int* failures) {
    auto q = dev->make_queue(16);
    auto buf = aligned_buffer(65536);
    for (int round = 0; round < 16; ++round) {
      uint64_t offset = uint64_t(index) * (8 << 20) + uint64_t(round) * 65536;
      fill_pattern(buf.get(), 65536, index + 100, offset);
      if (run_io(*q, Op::kWrite, offset, 65536, buf.get()) != 0) ++*failures;
    }
  };
  int failures[2] = {0, 0};
  std::thread a(worker, 0, &failures[0]), b(worker, 1, &failures[1]);
  a.join();
  b.join();
  EXPECT_EQ(failures[0] + failures[1], 0);
  auto q = dev->make_queue(1);
  auto buf = aligned_buffer(1 << 20);
  for (int index = 0; index < 2; ++index) {
    uint64_t base = uint64_t(index) * (8 << 20);
    ASSERT_EQ(run_io(*q, Op::kRead, base, 1 << 20, buf.get()), 0);
    for (uint32_t i = 0; i < (1u << 20); i += 13)
      ASSERT_EQ(buf[i], pattern_byte(index + 100, base + i)) << index << "/" << i;
  }
}

}  // namespace
}  // namespace sens::storage
