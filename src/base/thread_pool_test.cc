#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace zen {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1000, 1001}) {
      for (int64_t grain : {1, 4, 16}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
          EXPECT_EQ(b % grain, 0) << "ranges start on a grain boundary";
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
        }, grain);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << threads << " " << n << " " << i;
      }
    }
  }
}

TEST(ThreadPool, ManyBackToBackJobsAndIdleGaps) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int round = 0; round < 2000; ++round)
    pool.parallel_for(10, [&](int64_t b, int64_t e, int) { sum.fetch_add(e - b); });
  EXPECT_EQ(sum.load(), 20000);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // workers fall asleep
  pool.parallel_for(10, [&](int64_t b, int64_t e, int) { sum.fetch_add(e - b); });
  EXPECT_EQ(sum.load(), 20010);
}

TEST(ThreadPool, ChunksCoverEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1000, 1001}) {
      for (int64_t chunk : {1, 4, 16, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_chunks(n, [&](int64_t b, int64_t e, int slot) {
          EXPECT_EQ(b % chunk, 0) << "chunks start on a chunk boundary";
          EXPECT_LE(e - b, chunk);
          EXPECT_GE(slot, 0);
          EXPECT_LT(slot, threads);
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
        }, chunk);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << threads << " " << n << " " << i;
      }
    }
  }
}

// The first chunk holds its thread until every other chunk is done: a static split (half the
// chunks each) would never finish; handed out as threads come free, the other thread runs
// them all.
TEST(ThreadPool, ChunksGoToTheThreadThatIsFree) {
  ThreadPool pool(2);
  constexpr int64_t kChunks = 64;
  std::mutex mu;
  std::condition_variable cv;
  int64_t others_done = 0;
  bool timed_out = false;
  std::vector<int> slot_of(kChunks, -1);
  pool.parallel_chunks(kChunks, [&](int64_t b, int64_t, int slot) {
    slot_of[static_cast<size_t>(b)] = slot;
    std::unique_lock<std::mutex> lock(mu);
    if (b == 0) {
      timed_out = !cv.wait_for(lock, std::chrono::seconds(60), [&] { return others_done == kChunks - 1; });
    } else {
      ++others_done;
      cv.notify_all();
    }
  }, 1);
  ASSERT_FALSE(timed_out) << "chunks stayed with a busy thread";
  for (int64_t c = 1; c < kChunks; ++c) EXPECT_NE(slot_of[static_cast<size_t>(c)], slot_of[0]) << c;
}

TEST(ThreadPool, ChunkedAndSplitJobsBackToBack) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int round = 0; round < 2000; ++round) {
    pool.parallel_chunks(37, [&](int64_t b, int64_t e, int) { sum.fetch_add(e - b); }, 3);
    pool.parallel_for(10, [&](int64_t b, int64_t e, int) { sum.fetch_add(e - b); });
  }
  EXPECT_EQ(sum.load(), 2000 * 47);
}

// A chunk that throws: the exception reaches the caller once the other runners have
// returned, and the pool runs the next job whole.
TEST(ThreadPool, AThrowingChunkStopsTheJobAndThePoolCarriesOn) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::atomic<int64_t> after{0};
    std::atomic<bool> thrown{false};
    EXPECT_THROW(pool.parallel_chunks(1000, [&](int64_t b, int64_t, int) {
      if (thrown.load()) after.fetch_add(1);
      if (b == 10) {
        thrown.store(true);
        throw std::runtime_error("chunk 10");
      }
    }, 1), std::runtime_error);
    // With one thread nothing runs after it; with more, others may finish chunks they
    // claimed while it unwound, but none is run twice (checked by the job below) or lost.
    if (threads == 1) {
      EXPECT_EQ(after.load(), 0);
    }
    std::vector<std::atomic<int>> hits(100);
    pool.parallel_chunks(100, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
    }, 7);
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, ChunksNearTheLimitsOfInt64) {
  ThreadPool pool(2);
  std::atomic<int64_t> covered{0};
  const int64_t n = 1000;
  pool.parallel_chunks(n, [&](int64_t b, int64_t e, int) { covered.fetch_add(e - b); }, INT64_MAX);
  EXPECT_EQ(covered.load(), n);
}

TEST(ThreadPool, SplitRangeIsDeterministic) {
  int64_t b, e;
  split_range(10, 3, 0, 1, &b, &e);
  EXPECT_EQ(b, 0);
  EXPECT_EQ(e, 4);
  split_range(10, 3, 2, 1, &b, &e);
  EXPECT_EQ(b, 7);
  EXPECT_EQ(e, 10);
}

}  // namespace
}  // namespace zen
