// The fake driver's events (tests/fake_cuda/fake_state.h, fake::event) against the driver's
// rule, which the pool relies on when it records a released event again: a wait waits for the
// record current at its call, and a later record of the event, on another stream, neither
// completes that record nor releases the wait. A fake that let it would run a block's new
// owner before its old owner's kernel, and the reuse-safety tests would fail for no fault of
// the pool's. (cuCtxWaitEvent and cuEventSynchronize keep the record the same way; a record
// that completes early cannot be made there: every later record in the context is ordered
// after a context wait.) Linked against the fake, without the hooks.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "tests/fake_cuda/fake_cuda.h"

namespace {

// Host work that holds its stream until open() is called: the old owner's kernel, still
// running. The destructor opens it, so that a failed check leaves no stream held.
class gate {
public:
  ~gate() { open(); }
  void hold(CUstream s) { ASSERT_EQ(cuLaunchHostFunc(s, &gate::wait, this), CUDA_SUCCESS); }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

private:
  static void wait(void* self) {
    auto* g = static_cast<gate*>(self);
    std::unique_lock lock(g->mu_);
    g->cv_.wait(lock, [&] { return g->open_; });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Whether `s` ran all its work within `ms` milliseconds (it should not: it waits for a gate).
bool finishes_within(CUstream s, int ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (cuStreamQuery(s) == CUDA_SUCCESS) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

class fake_event_test : public testing::Test {
protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    for (CUstream* s : {&held_, &waiting_, &other_})
      ASSERT_EQ(cuStreamCreate(s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(cuEventCreate(&event_, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  }
  // The event recorded again on an idle stream, and that record complete: the event queries
  // complete (the query asks about its latest record).
  void record_elsewhere() {
    ASSERT_EQ(cuEventRecord(event_, other_), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamSynchronize(other_), CUDA_SUCCESS);
    EXPECT_EQ(cuEventQuery(event_), CUDA_SUCCESS);
  }

  CUcontext ctx_ = nullptr;
  CUstream held_ = nullptr, waiting_ = nullptr, other_ = nullptr;
  CUevent event_ = nullptr;
  gate gate_; // opened when the test ends, whatever failed
};

TEST_F(fake_event_test, a_stream_wait_waits_for_the_record_current_at_its_call) {
  gate_.hold(held_);
  ASSERT_EQ(cuEventRecord(event_, held_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(waiting_, event_, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(event_), CUDA_ERROR_NOT_READY);
  record_elsewhere();
  EXPECT_FALSE(finishes_within(waiting_, 250)) << "the wait passed before its record ran";
  gate_.open();
  EXPECT_EQ(cuStreamSynchronize(waiting_), CUDA_SUCCESS);
}

} // namespace
