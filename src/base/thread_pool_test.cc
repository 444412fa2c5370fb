#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
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
