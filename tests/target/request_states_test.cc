// The request state machine's transitions (request.h): exactly the moves of the diagram there,
// each allowed, and every other pair refused; advance() keeps the per-state counts.
#include "target/request.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>

namespace sens::target {
namespace {

using S = ReqState;

TEST(RequestStates, TheTableHoldsExactlyTheDiagramsMoves) {
  const std::set<std::pair<S, S>> moves = {
      {S::kFree, S::kNew},
      {S::kNew, S::kNeedBuffer},
      {S::kNew, S::kReady},
      {S::kNew, S::kSendingResponse},
      {S::kNew, S::kThrottled},
      {S::kThrottled, S::kNeedBuffer},
      {S::kThrottled, S::kReady},
      {S::kNeedBuffer, S::kAwaitingH2C},
      {S::kNeedBuffer, S::kReady},
      {S::kAwaitingH2C, S::kReady},
      {S::kAwaitingH2C, S::kSendingResponse},
      {S::kReady, S::kExecuting},
      {S::kExecuting, S::kWaitingDevice},
      {S::kExecuting, S::kSendingData},
      {S::kExecuting, S::kSendingResponse},
      {S::kExecuting, S::kAer},
      {S::kWaitingDevice, S::kExecuting},
      {S::kSendingData, S::kSendingResponse},
      {S::kSendingData, S::kFree},
      {S::kSendingResponse, S::kFree},
      {S::kAer, S::kSendingResponse},
      {S::kAer, S::kFree},
  };
  for (int from = 0; from <= int(S::kCount); ++from)
    for (int to = 0; to <= int(S::kCount); ++to)
      EXPECT_EQ(transition_allowed(S(from), S(to)), moves.count({S(from), S(to)}) == 1)
          << state_name(S(from)) << " -> " << state_name(S(to));
  static_assert(transition_allowed(S::kFree, S::kNew));
  static_assert(!transition_allowed(S::kFree, S::kExecuting));
}

TEST(RequestStates, AdvanceMovesTheCounts) {
  RequestStates states;
  states.add_free(2);
  Request r;
  states.advance(r, S::kNew);
  states.advance(r, S::kReady);
  EXPECT_EQ(r.state, S::kReady);
  EXPECT_EQ(states.count(S::kFree), 1u);
  EXPECT_EQ(states.count(S::kReady), 1u);
  EXPECT_EQ(states.count(S::kNew), 0u);
  EXPECT_EQ(states.bad_transitions(), 0u);
}

}  // namespace
}  // namespace sens::target
