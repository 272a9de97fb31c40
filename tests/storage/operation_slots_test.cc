// The bound the file and rbd queues share: past it a request waits in arrival order, and a
// finished request hands its operation to the oldest waiter.
#include "storage/operation_slots.h"

#include <gtest/gtest.h>

#include <set>

namespace sens::storage {
namespace {

struct Op {
  Op* next = nullptr;
  int id = 0;
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

}  // namespace
}  // namespace sens::storage
