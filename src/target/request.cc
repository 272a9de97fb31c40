#include "target/request.h"

#include <cassert>
#include <nlohmann/json.hpp>

#include "common/log.h"

namespace sens::target {

const char* state_name(ReqState s) {
  switch (s) {
    case ReqState::kFree:
      return "free";
    case ReqState::kNew:
      return "new";
    case ReqState::kNeedBuffer:
      return "need_buffer";
    case ReqState::kAwaitingH2C:
      return "awaiting_h2c";
    case ReqState::kReady:
      return "ready";
    case ReqState::kExecuting:
      return "executing";
    case ReqState::kWaitingDevice:
      return "waiting_device";
    case ReqState::kSendingData:
      return "sending_data";
    case ReqState::kSendingResponse:
      return "sending_response";
    case ReqState::kAer:
      return "aer";
    case ReqState::kThrottled:
      return "throttled";
    case ReqState::kCount:
      break;
  }
  return "?";
}

void RequestStates::disallowed(const Request& r, ReqState to) {
  ++bad_;
  LOG_WARN("request %u (cid %u): no transition %s -> %s", r.index, r.sqe.cid, state_name(r.state),
           state_name(to));
  assert(false && "request state machine: transition not allowed");
}

void RequestStates::drop(Request& r) {
  --counts_[size_t(r.state)];
  ++counts_[size_t(ReqState::kFree)];
  r.state = ReqState::kFree;
  ++dropped_;
}

nlohmann::json RequestStates::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (size_t i = 0; i < counts_.size(); ++i)
    if (counts_[i] && ReqState(i) != ReqState::kFree) j[state_name(ReqState(i))] = counts_[i];
  return j;
}

void RequestStates::merge_into(nlohmann::json& totals) const {
  for (size_t i = 0; i < counts_.size(); ++i) {
    if (!counts_[i] || ReqState(i) == ReqState::kFree) continue;
    const char* k = state_name(ReqState(i));
    totals[k] = totals.value(k, 0u) + counts_[i];
  }
  if (bad_) totals["bad_transitions"] = totals.value("bad_transitions", uint64_t(0)) + bad_;
  // Ended unanswered because their connection was closing.
  if (dropped_) totals["dropped_closing"] = totals.value("dropped_closing", uint64_t(0)) + dropped_;
}

}  // namespace sens::target
