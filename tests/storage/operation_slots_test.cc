// The bound the file and rbd queues share: past it a request waits in arrival order, and a
// finished request hands its operation to the oldest waiter.
#include "storage/operation_slots.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace sens::storage {
namespace {

struct Op {
  Op* next = nullptr;
  Request* req = nullptr;
};

TEST(OperationSlots, WaitersTakeFinishedOperationsInArrivalOrder) {
  OperationSlots<Op> slots(2);
  Request r[5];
  Op* a = slots.admit(&r[0]);
  Op* b = slots.admit(&r[1]);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(slots.admit(&r[2]), nullptr);
  EXPECT_EQ(slots.admit(&r[3]), nullptr);
  EXPECT_EQ(slots.requests(), 4u);
  EXPECT_EQ(slots.waited(), 2u);

  EXPECT_EQ(slots.release(b), &r[2]) << "the oldest waiter takes the operation over";
  // A newcomer never overtakes a waiter, even when it finds the count below the bound.
  EXPECT_EQ(slots.admit(&r[4]), nullptr);
  EXPECT_EQ(slots.release(a), &r[3]);
  EXPECT_EQ(slots.release(b), &r[4]);
  EXPECT_EQ(slots.release(a), nullptr);
  EXPECT_EQ(slots.release(b), nullptr);
  EXPECT_EQ(slots.requests(), 0u);
  EXPECT_EQ(slots.waited(), 3u);

  // Both operations are free again, and distinct.
  std::set<Op*> again = {slots.admit(&r[0]), slots.admit(&r[1])};
  EXPECT_EQ(again, (std::set<Op*>{a, b}));
  EXPECT_EQ(slots.admit(&r[2]), nullptr);
}

TEST(OperationSlots, AtLeastOneOperation) {
  OperationSlots<Op> slots(0);
  EXPECT_EQ(slots.size(), 1u);
  Request r[2];
  Op* op = slots.admit(&r[0]);
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(slots.admit(&r[1]), nullptr);
  EXPECT_EQ(slots.release(op), &r[1]);
  EXPECT_EQ(slots.release(op), nullptr);
}

// finish() completes the request and hands the operation to the oldest waiter before the
// callback runs, so a callback that submits again queues behind the waiters already there.
TEST(OperationSlots, FinishStartsTheOldestWaiterBeforeTheCallback) {
  OperationSlots<Op> slots(1);
  std::vector<std::string> events;
  Request r[3];
  auto start = [&](Op* op, Request* req) {
    op->req = req;
    events.push_back("start " + std::to_string(req - r));
  };
  struct Log {
    std::vector<std::string>* events;
    Request* base;
  } log{&events, r};
  for (Request& req : r) {
    req.user = &log;
    req.on_complete = [](Request* done) {
      auto* l = static_cast<Log*>(done->user);
      l->events->push_back("done " + std::to_string(done - l->base) + " result " +
                           std::to_string(done->result));
    };
  }
  Op* op = slots.admit(&r[0]);
  ASSERT_NE(op, nullptr);
  start(op, &r[0]);
  EXPECT_EQ(slots.admit(&r[1]), nullptr);
  EXPECT_EQ(slots.admit(&r[2]), nullptr);

  EXPECT_EQ(slots.finish(op, 7, start), 1);
  EXPECT_EQ(op->req, &r[1]);
  EXPECT_EQ(slots.finish(op, -5, start), 1);
  EXPECT_EQ(slots.finish(op, 0, start), 1);
  EXPECT_EQ(op->req, nullptr) << "no waiter left: the operation is free";
  EXPECT_EQ(events, (std::vector<std::string>{"start 0", "start 1", "done 0 result 7", "start 2",
                                              "done 1 result -5", "done 2 result 0"}));
  EXPECT_EQ(slots.requests(), 0u);
  EXPECT_NE(slots.admit(&r[0]), nullptr);
}

}  // namespace
}  // namespace sens::storage
