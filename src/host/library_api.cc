// The public classes of include/sens/host.h over their implementations: the value
// types' helpers, Poller, IoQueue and Controller (connect included).
#include <cerrno>
#include <cstdio>
#include <thread>

#include "host/library.h"
#include "transport/tls.h"
#include "transport/tls_records.h"

namespace sens {

// ---- public value types ----

std::string Status::to_string() const {
  char buf[16];
  std::snprintf(buf, sizeof(buf), " (0x%03x)", raw_);
  return std::string(host::completion_status_name(raw_)) + buf;
}

std::string TransportId::to_string() const {
  host::TransportId t;
  t.trtype = trtype;
  t.adrfam = adrfam;
  t.traddr = traddr;
  t.trsvcid = trsvcid;
  t.subnqn = subnqn;
  t.hostnqn = hostnqn;
  return t.to_string();
}

bool parse_trid(std::string_view text, TransportId* out, std::string* error) {
  std::string scratch;
  auto t = host::parse_trid(text, error ? error : &scratch);
  if (!t) return false;
  out->trtype = t->trtype;
  out->adrfam = t->adrfam;
  out->traddr = t->traddr;
  out->trsvcid = t->trsvcid;
  out->subnqn = t->subnqn;
  out->hostnqn = t->hostnqn;
  return true;
}

const char* share_mode_name(ShareMode m) {
  switch (m) {
    case ShareMode::kNone:
      return "none";
    case ShareMode::kLock:
      return "lock";
    case ShareMode::kSendList:
      return "sendlist";
  }
  return "?";
}

bool set_tls_aes_gcm(std::string_view name, std::string* error) {
  return transport::set_aes_gcm(std::string(name), error);
}

std::string tls_aes_gcm() {
  return transport::aes_gcm_description();
}

bool set_tls_records(std::string_view name, std::string* error) {
  std::string scratch;
  return transport::set_tls_records(std::string(name), error ? error : &scratch);
}

std::string kernel_tls_status() {
  return transport::kernel_tls_status();
}

bool parse_share_mode(std::string_view name, ShareMode* out) {
  for (ShareMode m : {ShareMode::kNone, ShareMode::kLock, ShareMode::kSendList}) {
    if (name == share_mode_name(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

const char* controller_state_name(ControllerState s) {
  switch (s) {
    case ControllerState::kConnecting:
      return "connecting";
    case ControllerState::kLive:
      return "live";
    case ControllerState::kReconnecting:
      return "reconnecting";
    case ControllerState::kFailed:
      return "failed";
    case ControllerState::kClosed:
      return "closed";
  }
  return "?";
}

// ---- the public classes over the implementation ----

Poller::Poller(const PollerOptions& options) : impl_(std::make_unique<host::PollerImpl>(options)) {}
Poller::~Poller() {
  // Inside its own process_completions (a callback): it goes once that returns.
  if (impl_ && impl_->busy_here()) {
    impl_->defer_self();
    impl_.release();
  }
}
int Poller::process_completions(uint32_t max, int64_t timeout_ns) {
  return impl_->process_completions(max, timeout_ns);
}

IoQueue::IoQueue(std::unique_ptr<host::IoQueueImpl> impl) : impl_(std::move(impl)) {}
IoQueue::~IoQueue() {
  host::IoQueueImpl::destroy(std::move(impl_));
}

int IoQueue::read(uint32_t nsid, uint64_t lba, uint32_t blocks, const iovec* iov, int iovcnt,
                  Callback cb, void* ctx) {
  return impl_->submit(nvme::io_op::kRead, nsid, lba, blocks, iov, iovcnt, cb, ctx);
}
int IoQueue::write(uint32_t nsid, uint64_t lba, uint32_t blocks, const iovec* iov, int iovcnt,
                   Callback cb, void* ctx) {
  return impl_->submit(nvme::io_op::kWrite, nsid, lba, blocks, iov, iovcnt, cb, ctx);
}
int IoQueue::flush(uint32_t nsid, Callback cb, void* ctx) {
  return impl_->submit(nvme::io_op::kFlush, nsid, 0, 0, nullptr, 0, cb, ctx);
}
int IoQueue::write_zeroes(uint32_t nsid, uint64_t lba, uint32_t blocks, Callback cb, void* ctx) {
  return impl_->submit(nvme::io_op::kWriteZeroes, nsid, lba, blocks, nullptr, 0, cb, ctx);
}
int IoQueue::deallocate(uint32_t nsid, uint64_t lba, uint32_t blocks, Callback cb, void* ctx) {
  return impl_->submit(nvme::io_op::kDatasetMgmt, nsid, lba, blocks, nullptr, 0, cb, ctx);
}
int IoQueue::process_completions(uint32_t max, int64_t timeout_ns) {
  host::PollerImpl* p = impl_->poller();
  return p ? p->process_completions(max, timeout_ns) : 0;
}
uint32_t IoQueue::depth() const {
  return impl_->depth();
}
uint32_t IoQueue::inflight() const {
  return impl_->inflight();
}
int IoQueue::connection() const {
  return impl_->connection();
}
const char* IoQueue::connection_state() const {
  return impl_->connection_state();
}

Controller::Controller(std::shared_ptr<host::ControllerImpl> impl) : impl_(std::move(impl)) {}
Controller::~Controller() {
  if (!impl_) return;
  if (host::on_library_thread()) {
    // From one of the library's threads (a callback without a poller, a connect, admin, AER or
    // state callback): shutting down waits for those threads, so it runs on one of its own.
    std::thread([impl = std::move(impl_)] { impl->shutdown(); }).detach();
    return;
  }
  impl_->shutdown();
}

namespace {
struct ConnectJob {
  std::shared_ptr<host::ControllerImpl> impl;
  ConnectCallback cb = nullptr;
  void* ctx = nullptr;
  std::promise<ConnectResult> promise;
  bool use_promise = false;
  void finish(ConnectResult r) {
    if (use_promise)
      promise.set_value(std::move(r));
    else if (cb)
      cb(ctx, std::move(r));
  }
};
}  // namespace

static void start_connect(std::string_view trid_text, const ControllerOptions& options,
                          std::shared_ptr<ConnectJob> job) {
  std::string err;
  auto trid = host::parse_trid(trid_text, &err);
  if (trid && trid->subnqn == nvme::kDiscoveryNqn)
    err = "subnqn missing: the library connects to an NVM subsystem, not to discovery";
  coalesce::Config scratch;
  if (trid && err.empty()) err = host::coalesce_config(options, &scratch);
  PollMode pm;
  if (trid && err.empty() && !parse_poll_mode(options.poll, &pm))
    err = "poll '" + options.poll + "': expected off, adaptive or always";
  if (!trid || !err.empty()) {
    ConnectResult r;
    r.error = err;
    job->finish(std::move(r));
    return;
  }
  job->impl = std::make_shared<host::ControllerImpl>(*trid, options);
  host::ControllerImpl* impl = job->impl.get();
  impl->control().run_job([job, impl] {
    ConnectResult r;
    r.error = impl->bring_up();
    if (r.error.empty()) {
      r.controller = host::ControllerImpl::wrap(std::move(job->impl));
      job->finish(std::move(r));
      return;
    }
    // Torn down off this thread (its destructor joins it), and only then reported: a caller
    // that exits on the error must not leave the library's threads running.
    std::thread([job, r = std::move(r)]() mutable {
      job->impl.reset();
      job->finish(std::move(r));
    }).detach();
  });
}

std::future<ConnectResult> Controller::connect(std::string_view trid,
                                               const ControllerOptions& options) {
  auto job = std::make_shared<ConnectJob>();
  job->use_promise = true;
  auto f = job->promise.get_future();
  start_connect(trid, options, job);
  return f;
}

void Controller::connect(std::string_view trid, const ControllerOptions& options,
                         ConnectCallback cb, void* ctx) {
  auto job = std::make_shared<ConnectJob>();
  job->cb = cb;
  job->ctx = ctx;
  start_connect(trid, options, job);
}

std::unique_ptr<sens::Controller> host::ControllerImpl::wrap(std::shared_ptr<ControllerImpl> impl) {
  return std::unique_ptr<sens::Controller>(new sens::Controller(std::move(impl)));
}

const std::vector<Namespace>& Controller::namespaces() const {
  return impl_->namespaces();
}
const Namespace* Controller::find_namespace(uint32_t nsid) const {
  return impl_->find_namespace(nsid);
}
std::unique_ptr<IoQueue> Controller::create_io_queue(Poller* poller, uint32_t depth,
                                                     std::string* error) {
  return impl_->create_io_queue(poller, depth, error);
}
int Controller::admin(const AdminCommand& cmd, void* buf, uint32_t len, Callback cb, void* ctx) {
  return impl_->admin(cmd, buf, len, cb, ctx);
}
Completion Controller::admin_sync(const AdminCommand& cmd, void* buf, uint32_t len) {
  struct Wait {
    std::promise<Completion> p;
  } w;
  auto f = w.p.get_future();
  int rc = impl_->admin(
      cmd, buf, len,
      [](void* ctx, const Completion& c) { static_cast<Wait*>(ctx)->p.set_value(c); }, &w);
  if (rc != 0) return Completion{Status(Status::kHostPathError), 0, 0};
  return f.get();
}
void Controller::set_async_event_callback(AsyncEventCallback cb, void* ctx) {
  impl_->set_async_event_callback(cb, ctx);
}
ControllerState Controller::state() const {
  return impl_->state();
}
void Controller::set_state_callback(void (*cb)(void* ctx, ControllerState state), void* ctx) {
  impl_->set_state_callback(cb, ctx);
}
std::string Controller::last_error() const {
  return impl_->last_error();
}
ControllerCounters Controller::counters() const {
  return impl_->counters();
}
uint16_t Controller::cntlid() const {
  return impl_->cntlid();
}
const std::string& Controller::subnqn() const {
  return impl_->subnqn();
}
uint32_t Controller::max_transfer() const {
  return impl_->max_transfer();
}
uint64_t Controller::keep_alives_sent() const {
  return impl_->keep_alives();
}
const ControllerOptions& Controller::options() const {
  return impl_->options();
}
void Controller::shutdown() {
  impl_->shutdown();
}

}  // namespace sens
