#pragma once
// One NVMe/TCP queue: a TCP connection, its PDU state machine and its command slots. It lives
// on one reactor thread and is touched by no other, so nothing here locks. Outbound PDUs all
// go through the connection's SendQueue (the coalescing point); inbound ones through its
// PduReader.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reactor/reactor.h"
#include "storage/device.h"
#include "target/subsystem.h"
#include "transport/pdu_reader.h"
#include "transport/send_queue.h"
#include "wire/pdu.h"

namespace sens::target {

class ReactorContext;

class Connection final : public EventHandler,
                         public transport::SendQueue::Owner,
                         public transport::PduReader::Sink {
 public:
  Connection(ReactorContext& ctx, int fd, uint64_t id, std::string peer, uint16_t local_port);
  ~Connection() override;

  uint64_t id() const { return id_; }
  bool closed() const { return closed_; }
  // Sends what is queued, then closes. Connections close themselves on fatal errors.
  void close(const char* why);
  // Counters for --stats-json.
  nlohmann::json stats_json() const;
  const coalesce::Stats& coalesce_stats() const { return sendq_.scheduler().stats(); }
  const transport::RecvCounters& recv_counters() const { return reader_.counters(); }
  const transport::SendCounters& send_counters() const { return sendq_.counters(); }
  uint64_t commands() const { return commands_; }
  uint32_t inflight_io() const { return inflight_io_; }
  // Whether the connection may be destroyed (closed and no device I/O in flight).
  bool reapable() const { return closed_ && inflight_io_ == 0 && !close_pending_; }

  // EventHandler
  void on_event(uint32_t events) override;
  // SendQueue::Owner
  void want_writable(bool on) override;
  void on_send_error(int err) override;
  // PduReader::Sink
  bool on_pdu_header(const pdu::CommonHeader& header, const pdu::Layout& layout) override;
  bool on_pdu_payload(const pdu::CommonHeader& header, bool digest_ok) override;
  void on_pdu_error(const pdu::Check& check, const uint8_t* header, uint32_t len) override;

 private:
  enum class State { kWaitIC, kWaitConnect, kReady, kClosing, kClosed };
  enum class SlotState : uint8_t { kFree, kInCapsule, kWaitData, kExec, kSending, kAer };

  struct Command {
    Connection* conn = nullptr;
    uint16_t index = 0;  // the ttag of its R2T
    SlotState state = SlotState::kFree;
    nvme::Sqe sqe{};
    uint8_t* buf = nullptr;
    uint32_t xfer_len = 0;        // bytes this command moves
    uint32_t received = 0;        // H2C bytes received so far
    uint16_t pending_status = 0;  // an error found while data was still arriving
    uint64_t offset = 0;          // device byte offset
    Namespace* ns = nullptr;
    uint32_t dsm_next = 0, dsm_count = 0;  // Dataset Management range walk
    uint32_t flush_next = 0;               // broadcast flush walk
    storage::Request io;
    pdu::HeaderSlot data_hdr{}, resp_hdr{}, r2t_hdr{};
    uint32_t ddgst = 0;
  };

  // Receive side
  bool handle_icreq(const pdu::ICReq& req);
  bool handle_capsule(const pdu::CapsuleCmd& cmd, const pdu::Layout& layout);
  bool handle_h2c_data(const pdu::DataHeader& data);
  void fatal(uint16_t fes, uint32_t fei, const char* why, const void* header, uint32_t len);

  // Command execution
  void dispatch(Command& c);
  void exec_fabrics(Command& c);
  void exec_connect(Command& c);
  void exec_property_get(Command& c);
  void exec_property_set(Command& c);
  void exec_admin(Command& c);
  void exec_identify(Command& c);
  void exec_get_log_page(Command& c);
  void exec_set_features(Command& c);
  void exec_get_features(Command& c);
  void exec_io(Command& c);
  void start_io(Command& c);  // after the data of a write has arrived
  void dsm_step(Command& c);
  void flush_step(Command& c);
  void submit_device(Command& c, storage::Op op, uint64_t offset, uint64_t len, void* buf);
  static void on_device_done(storage::Request* req);
  void device_done(Command& c);

  // Send side
  void send_data_in(Command& c, const void* data, uint32_t len);  // C2HData (+ CapsuleResp)
  void complete(Command& c, uint16_t status, uint64_t result = 0);
  void send_r2t(Command& c);
  static void on_resp_sent(void* ctx, uint64_t index);
  void free_slot(Command& c);
  coalesce::PduClass data_class() const;

  void watch(bool readable, bool writable);
  void reset_keep_alive();
  void on_keep_alive_timer();
  void on_setup_timer();
  uint32_t inline_limit() const;

  ReactorContext& ctx_;
  int fd_;
  uint64_t id_;
  std::string peer_;
  uint16_t local_port_;
  State state_ = State::kWaitIC;
  bool closed_ = false;
  bool close_pending_ = false;  // a TermReq / Disconnect response is on its way out
  bool want_out_ = false;
  bool reading_ = true;
  pdu::Digests digests_;
  uint32_t maxr2t_ = 0;
  transport::PduReader reader_;
  transport::SendQueue sendq_;

  // Set by Connect.
  uint16_t qid_ = 0;
  uint32_t sq_size_ = 0;
  uint16_t sqhd_ = 0;
  bool sqflow_disabled_ = false;
  Subsystem* subsystem_ = nullptr;
  std::shared_ptr<Controller> ctrl_;
  QueueCounters counters_;

  std::vector<Command> slots_;
  std::vector<uint16_t> free_;
  uint8_t* buffers_ = nullptr;
  size_t buffers_bytes_ = 0;
  uint32_t buf_size_ = 0;
  Command* current_ = nullptr;  // the command whose PDU payload is arriving
  uint32_t aer_outstanding_ = 0;
  uint32_t inflight_io_ = 0;
  uint64_t commands_ = 0;

  pdu::HeaderSlot ic_hdr_{}, term_hdr_{};
  Timer ka_timer_;
  Timer setup_timer_;  // ICReq + Connect deadline; later, the deadline to send a C2HTermReq
  Nanos last_admin_ = 0;
};

}  // namespace sens::target
