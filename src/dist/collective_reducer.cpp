#include "dist/collective_reducer.h"

#include "core/error.h"

#ifndef BIGBATCH_NO_COLLECTIVES
#include <torch/csrc/autograd/function_hook.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <utility>

#include "core/text.h"

namespace bigbatch {

namespace {

// libtorch 2.0 split the process group into a front and per-device backends: Gloo and NCCL are
// c10d::Backend there, and were process groups themselves in 1.13. Both offer the collectives
// used here with the same signatures.
#if TORCH_VERSION_MAJOR >= 2
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

// A parameter's gradient accumulator, whose post-hook says its gradient is complete: held by a
// std::shared_ptr in libtorch 1.13 and by a c10::intrusive_ptr in newer ones (2.15).
using GradAccumulator =
    decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));

// The window's totals travel at the end of the last bucket, the last to be launched: by then
// this rank's pre-reduction gradient norm is complete too (WindowTotals::pre_reduction_norm_scale).
enum TotalsSlot : int64_t {
  kSamples,
  kItems,
  kLossSum,
  kCorrect,
  kStop,
  kSmallBatches,
  kSmallSqNorm,
  kSmallInverseItems
};
constexpr int64_t kTotalsSlots = kSmallInverseItems + 1;
// Sample and item counts travel in the gradients' float32 bucket; integers are exact below 2^24.
constexpr double kMaxExactItems = 16777216.0;

std::chrono::milliseconds to_milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

bool is_loopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

// The names of this host's network interfaces, for an error that must list them.
std::vector<std::string> interface_names() {
  std::vector<std::string> names;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0)
    return names;
  for (const ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (std::find(names.begin(), names.end(), entry->ifa_name) == names.end())
      names.emplace_back(entry->ifa_name);
  }
  ::freeifaddrs(list);
  return names;
}

// GLOO_SOCKET_IFNAME names the interface Gloo's connections use. One that this host lacks would
// fail only inside Gloo's set-up, in words that blame the rendezvous: said here, first.
void check_socket_interface(const DistEnvironment& env) {
  const char* name = std::getenv("GLOO_SOCKET_IFNAME");
  if (name == nullptr)
    return;
  if (*name != '\0' && ::if_nametoindex(name) != 0)
    return;
  throw Error(ErrorKind::Distributed,
              "rank " + std::to_string(env.rank) + ": GLOO_SOCKET_IFNAME=" + name +
                  " names no network interface of this host (it has: " +
                  join(interface_names(), ", ") + ")",
              "set it to the interface that reaches MASTER_ADDR " + env.master_addr +
                  ", or unset it: bigbatch then uses the one on the route there");
}

// This host's address on the route to `host`: a UDP socket connected there (which sends
// nothing) is bound by the kernel to the interface its packets would leave by.
std::optional<std::string> local_address_towards(const std::string& host, int64_t port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0)
    return std::nullopt;
  std::optional<std::string> address;
  for (const addrinfo* a = found; a != nullptr && !address; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      continue;
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    char text[INET6_ADDRSTRLEN] = {};
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      const void* raw =
          local.ss_family == AF_INET
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (::inet_ntop(local.ss_family, raw, text, sizeof text) != nullptr)
        address = text;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return address;
}

// Whether a new TCP connection to host:port opens within `timeout`.
bool accepts_connections(const std::string& host, int64_t port, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0)
    return false;
  bool open = false;
  for (const addrinfo* a = found; a != nullptr && !open; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
      continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      open = true;
    } else if (errno == EINPROGRESS) {
      pollfd waiting{fd, POLLOUT, 0};
      int error = 0;
      socklen_t length = sizeof error;
      open = ::poll(&waiting, 1, static_cast<int>(timeout.count())) == 1 &&
             ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return open;
}

// The first address of interface `name` (IPv4 first), for naming where a rank is.
std::string interface_address(const std::string& name) {
  std::string found;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0)
    return name;
  for (const ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || name != entry->ifa_name)
      continue;
    const int family = entry->ifa_addr->sa_family;
    if (family != AF_INET && (family != AF_INET6 || !found.empty()))
      continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw = family == AF_INET
                          ? static_cast<const void*>(
                                &reinterpret_cast<const sockaddr_in*>(entry->ifa_addr)->sin_addr)
                          : static_cast<const void*>(
                                &reinterpret_cast<const sockaddr_in6*>(entry->ifa_addr)->sin6_addr);
    if (::inet_ntop(family, raw, text, sizeof text) != nullptr)
      found = text;
    if (family == AF_INET)
      break;
  }
  ::freeifaddrs(list);
  return found.empty() ? name : found + " (" + name + ")";
}

// Where this rank's Gloo connections live: the interface GLOO_SOCKET_IFNAME names; loopback for a
// job on one machine; else the address on the route to MASTER_ADDR. Gloo's own default (the
// address the host name resolves to) is often loopback (/etc/hosts), which peers on other hosts
// cannot reach: they would wait out the timeout several times over, then blame the rendezvous.
std::shared_ptr<::gloo::transport::Device> make_gloo_device(const DistEnvironment& env,
                                                            std::string& address) {
  if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME")) {
    address = interface_address(interface);
    return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
  }
  if (is_loopback(env.master_addr)) {
    address = "127.0.0.1";
    return c10d::ProcessGroupGloo::createDeviceForHostname(address);
  }
  if (const auto local = local_address_towards(env.master_addr, env.master_port)) {
    address = *local;
    return c10d::ProcessGroupGloo::createDeviceForHostname(address);
  }
  address = "this host's default address";
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

class CollectiveReducer final : public GradientReducer {
 public:
  CollectiveReducer(const DistEnvironment& env, const CollectiveOptions& options)
      : env_(env), options_(options) {
    check_socket_interface(env);
    try {
      c10d::TCPStoreOptions store_options;
      store_options.port = static_cast<uint16_t>(env.master_port);
      store_options.isServer = env.rank == 0 && !env.agent_store;
      store_options.numWorkers = static_cast<size_t>(env.world_size);
      // libtorch 1.13's own wait for the workers returns silently at its timeout, and Gloo
      // then waits as long again: each rank says it joined, and rank 0 waits for those keys.
      store_options.waitWorkers = false;
      store_options.timeout = to_milliseconds(options.timeout_seconds);
      store_ = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
      // The agent's store holds its own keys, and those of a torch.distributed group the
      // program made: bigbatch's live under a prefix of their own.
      if (env.agent_store)
        store_ = c10::make_intrusive<c10d::PrefixStore>("bigbatch", store_);
      std::string address;
      auto device = make_gloo_device(env, address);
      // Where each rank is, read back when one stops answering.
      store_->set(address_key(env.rank), std::vector<uint8_t>(address.begin(), address.end()));
      store_->set(joined_key(env.rank), std::vector<uint8_t>{1});
      if (env.rank == 0)
        wait_for_every_rank();
      gloo_device_ = device;
      gloo_ = make_gloo_group(store_);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(
          ErrorKind::Distributed,
          "rank " + std::to_string(env.rank) + " could not join the job at " + env.master_addr +
              ":" + std::to_string(env.master_port) + " within " +
              std::to_string(int(options.timeout_seconds)) + " s: " + first_line(e.what()),
          "check MASTER_ADDR/MASTER_PORT, that rank 0 is running and that every rank started");
    }
  }

  // A collective that failed: in a job that was started alike, another rank left or hung.
  [[noreturn]] void peer_failed(const std::string& collective, const std::exception& e) const {
    throw Error(ErrorKind::Distributed,
                "rank " + std::to_string(env_.rank) + ": " + collective +
                    " failed: " + first_line(e.what()) + "; " + lost_peers(),
                "another rank exited, stopped responding or lost its network (timeout " +
                    std::to_string(int(options_.timeout_seconds)) + " s); see its output");
  }

  // Which ranks stopped answering, as far as the rendezvous can tell within a few seconds: each
  // rank that sees a collective fail says so there; those that do not within the wait are the
  // lost ones, named with the address they joined from. Gloo's own message names only the
  // neighbour on its ring, which may be alive and waiting on the same lost rank.
  std::string lost_peers() const {
    const auto wait = std::chrono::milliseconds(kLostPeerWaitMs);
    const std::string unreachable = "rank 0 and the rendezvous at " + env_.master_addr + ":" +
                                    std::to_string(env_.master_port) +
                                    " (MASTER_ADDR) cannot be reached from here";
    // The store's own client waits on a dead link far past its timeout (libtorch 2.x): a new
    // connection tells first whether the rendezvous can be reached at all.
    if (!accepts_connections(env_.master_addr, env_.master_port, wait))
      return unreachable;
    try {
      store_->setTimeout(wait);
      store_->set(failed_key(env_.rank), std::vector<uint8_t>{1});
      std::vector<std::string> keys;
      for (int64_t rank = 0; rank < env_.world_size; ++rank)
        keys.push_back(failed_key(rank));
      try {
        store_->wait(keys, wait);
      } catch (const std::exception&) {
      }
      // The ranks that did not answer, grouped by where they joined from.
      std::vector<int64_t> silent;
      std::vector<std::pair<std::string, std::vector<std::string>>> lost;
      for (int64_t rank = 0; rank < env_.world_size; ++rank) {
        if (store_->check({failed_key(rank)}))
          continue;
        silent.push_back(rank);
        const std::vector<uint8_t> bytes = store_->get(address_key(rank));
        const std::string at(bytes.begin(), bytes.end());
        auto place = std::find_if(lost.begin(), lost.end(),
                                  [&](const auto& group) { return group.first == at; });
        if (place == lost.end())
          place = lost.insert(lost.end(), {at, {}});
        place->second.push_back(std::to_string(rank));
      }
      std::vector<std::string> groups;
      for (const auto& [at, ranks] : lost)
        groups.push_back(join(ranks, ", ") + " at " + at);
      const std::string verdict = groups.empty()
                                      ? "every rank saw it fail (no rank is missing)"
                                      : "rank(s) " + join(groups, " and ") + " stopped answering";
      let_answering_ranks_read(silent, wait);
      return verdict;
    } catch (const std::exception&) {
      return unreachable;  // the rendezvous lives in rank 0
    }
  }

  // The rendezvous lives in rank 0's process, so rank 0 leaves only once each rank that answered
  // has read who did not (or the wait ends): a rank still reading would find the rendezvous gone
  // and blame it, although it lost the same peers as rank 0 (their waits end milliseconds apart).
  void let_answering_ranks_read(const std::vector<int64_t>& silent,
                                std::chrono::milliseconds wait) const {
    if (env_.rank != 0) {
      store_->set(read_key(env_.rank), std::vector<uint8_t>{1});
      return;
    }
    std::vector<std::string> keys;
    for (int64_t rank = 1; rank < env_.world_size; ++rank) {
      if (std::find(silent.begin(), silent.end(), rank) == silent.end())
        keys.push_back(read_key(rank));
    }
    try {
      if (!keys.empty())
        store_->wait(keys, wait);
    } catch (const std::exception&) {
    }
  }

  static constexpr int kLostPeerWaitMs = 3000;
  static std::string joined_key(int64_t rank) { return "bigbatch/joined/" + std::to_string(rank); }
  static std::string address_key(int64_t rank) {
    return "bigbatch/address/" + std::to_string(rank);
  }
  static std::string failed_key(int64_t rank) { return "bigbatch/failed/" + std::to_string(rank); }
  static std::string read_key(int64_t rank) { return "bigbatch/read/" + std::to_string(rank); }

  // Rank 0: every rank has reached the store within the timeout, or the error names those that
  // did not (a rank that exited before joining, or was never started).
  void wait_for_every_rank() {
    std::vector<std::string> keys;
    for (int64_t rank = 0; rank < env_.world_size; ++rank)
      keys.push_back(joined_key(rank));
    try {
      store_->wait(keys, to_milliseconds(options_.timeout_seconds));
      return;
    } catch (const std::exception&) {
    }
    std::vector<std::string> missing;
    for (int64_t rank = 0; rank < env_.world_size; ++rank) {
      if (!store_->check({joined_key(rank)}))
        missing.push_back(std::to_string(rank));
    }
    throw Error(ErrorKind::Distributed,
                "rank(s) " + join(missing, ", ") + " of " + std::to_string(env_.world_size) +
                    " did not join the job at " + env_.master_addr + ":" +
                    std::to_string(env_.master_port) + " within --dist-timeout " +
                    format_double(options_.timeout_seconds) + " s",
                "check that every rank was started and is still running (see the launcher's "
                "report of ranks that exited), and the same MASTER_ADDR/MASTER_PORT everywhere");
  }

  void attach(const std::vector<at::Tensor>& parameters) override {
    BB_INTERNAL_ASSERT(buckets_.empty(), "attach() called twice");
    if (!parameters.empty())
      group_for(parameters.front());  // a device without its backend is said here, once
    // Reverse order: backward produces the last layers' gradients first, so buckets fill in
    // the order the gradients become ready.
    std::vector<at::Tensor> ordered(parameters.rbegin(), parameters.rend());
    std::vector<size_t> ends;  // bucket b holds ordered[ends[b - 1], ends[b])
    for (size_t begin = 0; begin < ordered.size(); begin = ends.back()) {
      int64_t bytes = 0;
      size_t end = begin;
      // Buckets hold one dtype and device each; cut at the size limit or at a change.
      while (end < ordered.size() &&
             (end == begin ||
              (bytes + static_cast<int64_t>(ordered[end].nbytes()) <= options_.bucket_bytes &&
               ordered[end].options().type_equal(ordered[begin].options())))) {
        bytes += static_cast<int64_t>(ordered[end].nbytes());
        ++end;
      }
      ends.push_back(end);
    }
    for (size_t bucket = 0; bucket < ends.size(); ++bucket) {
      const size_t begin = bucket == 0 ? 0 : ends[bucket - 1];
      const size_t end = ends[bucket];
      int64_t numel = bucket + 1 == ends.size() ? kTotalsSlots : 0;
      for (size_t i = begin; i < end; ++i)
        numel += ordered[i].numel();
      auto flat = torch::zeros({numel}, ordered[begin].options());
      int64_t offset = 0;
      std::vector<BucketSlice> slices;
      for (size_t i = begin; i < end; ++i) {
        auto& p = const_cast<at::Tensor&>(ordered[i]);
        slices.push_back({parameters.size() - 1 - i, offset, p.numel()});
        p.mutable_grad() = flat.narrow(0, offset, p.numel()).view_as(p);
        offset += p.numel();
        // Told when this parameter's gradient is final for the backward pass (DDP's hook).
        auto accumulator = torch::autograd::impl::grad_accumulator(p);
        accumulator->add_post_hook(std::make_unique<ReadyHook>(this, bucket));
        accumulators_.push_back(std::move(accumulator));
      }
      buckets_.push_back(flat);
      slices_.push_back(std::move(slices));
      parameters_in_bucket_.push_back(static_cast<int64_t>(end - begin));
    }
  }

  void begin_last_backward(const WindowTotals& local) override {
    write_totals(local);
    armed_ = true;
    pending_ = parameters_in_bucket_;
    next_launch_ = 0;
    in_flight_.clear();
  }

  // From the autograd engine: one more parameter of `bucket` has its final gradient.
  void mark_ready(size_t bucket) {
    if (!armed_)
      return;
    if (--pending_[bucket] == 0) {
      // Every rank must issue the buckets in the same order, whatever order they fill in.
      while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0)
        launch(next_launch_++);
    }
  }

  WindowTotals reduce(std::vector<at::Tensor>& gradients, const WindowTotals& local) override {
    BB_INTERNAL_ASSERT(!buckets_.empty(), "reduce() before attach()");
    (void)gradients;  // they are views into buckets_
    if (!armed_) {
      // No marked last micro-step (this rank had no samples in a short window, or a caller
      // that does not mark): everything goes now, in the same order.
      write_totals(local);
      next_launch_ = 0;
      in_flight_.clear();
    }
    armed_ = false;
    try {
      while (next_launch_ < buckets_.size())
        launch(next_launch_++);
      for (auto& work : in_flight_)
        work->wait();
      in_flight_.clear();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      peer_failed("gradient all-reduce", e);
    }
    auto slots = totals();
    const auto host = slots.to(torch::kCPU, torch::kFloat64);
    const double* sum = host.data_ptr<double>();
    BB_INTERNAL_ASSERT(sum[kItems] < kMaxExactItems && sum[kSamples] < kMaxExactItems,
                       "more items per update than float32 counts exactly");
    WindowTotals global;
    global.counts.samples = static_cast<int64_t>(sum[kSamples]);
    global.counts.items = static_cast<int64_t>(sum[kItems]);
    global.counts.loss_sum = sum[kLossSum];
    global.counts.correct = static_cast<int64_t>(sum[kCorrect]);
    global.stop = sum[kStop];
    global.small_batches = sum[kSmallBatches];
    global.small_sq_norm = sum[kSmallSqNorm];
    global.small_inverse_items = sum[kSmallInverseItems];
    slots.zero_();
    return global;
  }

  void broadcast_from_first_rank(std::vector<at::Tensor>& tensors) override {
    try {
      for (auto& t : tensors) {
        std::vector<at::Tensor> one{t};
        group_for(t)->broadcast(one)->wait();
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      peer_failed("broadcast from rank 0 (set-up check or initial weights)", e);
    }
  }

  void broadcast_from(std::vector<at::Tensor>& tensors, int64_t root) override {
    broadcast_on(gloo_.get(), tensors, root,
                 "broadcast of rank " + std::to_string(root) + "'s parameters (--shard-optimizer)");
  }

  void open_side_channel() override {
    if (side_)
      return;
    try {
      side_ = make_gloo_group(c10::make_intrusive<c10d::PrefixStore>("side", store_));
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      peer_failed("opening the second channel (--shard-optimizer)", e);
    }
  }

  void broadcast_aside(std::vector<at::Tensor>& tensors, int64_t root) override {
    BB_INTERNAL_ASSERT(side_, "broadcast_aside() before open_side_channel()");
    // Through host memory: the side channel is Gloo's (a device's backend orders its calls
    // with the gradients').
    std::vector<at::Tensor> host;
    for (const auto& t : tensors)
      host.push_back(t.is_cuda() ? t.cpu() : t);
    broadcast_on(side_.get(), host, root,
                 "broadcast of rank " + std::to_string(root) +
                     "'s optimizer preconditioner (--shard-optimizer)");
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].is_cuda())
        tensors[i].copy_(host[i]);
    }
  }

  std::vector<std::vector<size_t>> reduction_buckets() const override {
    std::vector<std::vector<size_t>> buckets;
    for (const auto& slices : slices_) {
      buckets.emplace_back();
      for (const BucketSlice& slice : slices)
        buckets.back().push_back(slice.parameter);
    }
    return buckets;
  }

  void sum_over_ranks(at::Tensor& tensor) override {
    try {
      std::vector<at::Tensor> one{tensor};
      group_for(tensor)->allreduce(one)->wait();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      peer_failed("sum over the ranks (set-up check)", e);
    }
  }

  bool keeps_gradient_storage() const override { return true; }
  int64_t world_size() const override { return env_.world_size; }
  int64_t rank() const override { return env_.rank; }
  int64_t calls() const override { return calls_; }

 private:
  struct ReadyHook final : torch::autograd::FunctionPostHook {
    ReadyHook(CollectiveReducer* reducer, size_t bucket) : reducer_(reducer), bucket_(bucket) {}
    torch::autograd::variable_list operator()(
        const torch::autograd::variable_list& outputs,
        const torch::autograd::variable_list& /*inputs*/) override {
      reducer_->mark_ready(bucket_);
      return outputs;
    }
    CollectiveReducer* reducer_;
    size_t bucket_;
  };

  at::Tensor totals() {
    const auto& last = buckets_.back();
    return last.narrow(0, last.numel() - kTotalsSlots, kTotalsSlots);
  }

  void write_totals(const WindowTotals& local) {
    const double values[kTotalsSlots] = {double(local.counts.samples),
                                         double(local.counts.items),
                                         local.counts.loss_sum,
                                         double(local.counts.correct),
                                         local.stop,
                                         local.small_batches,
                                         local.small_sq_norm,
                                         local.small_inverse_items};
    totals().copy_(torch::from_blob(const_cast<double*>(values), {kTotalsSlots}, torch::kFloat64));
    pre_reduction_norm_scale_ = local.pre_reduction_norm_scale;
    pre_reduction_norm_weight_ = local.pre_reduction_norm_weight;
    local_sq_norm_ = 0;
  }

  // A Gloo group over this job's ranks, its keys in `store`.
  c10::intrusive_ptr<c10d::ProcessGroupGloo> make_gloo_group(
      const c10::intrusive_ptr<c10d::Store>& store) const {
    auto gloo_options =
        c10d::ProcessGroupGloo::Options::create(to_milliseconds(options_.timeout_seconds));
    gloo_options->devices.push_back(gloo_device_);
    return c10::make_intrusive<c10d::ProcessGroupGloo>(
        store, static_cast<int>(env_.rank), static_cast<int>(env_.world_size), gloo_options);
  }

  // Host tensors on `group`; a device's on its own backend.
  void broadcast_on(CollectiveBackend* group, std::vector<at::Tensor>& tensors, int64_t root,
                    const std::string& what) {
    try {
      c10d::BroadcastOptions options;
      options.rootRank = root;
      for (auto& t : tensors) {
        std::vector<at::Tensor> one{t};
        (t.is_cuda() ? group_for(t) : group)->broadcast(one, options)->wait();
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      peer_failed(what, e);
    }
  }

  // Issues one bucket's all-reduce without waiting for it.
  void launch(size_t bucket) {
    const bool last = bucket + 1 == buckets_.size();
    if (pre_reduction_norm_scale_ > 0) {
      // Read before the all-reduce overwrites the bucket (CPU ops run to completion here; on a
      // device they are queued ahead of the collective on the same stream).
      const auto& flat = buckets_[bucket];
      const int64_t gradients = flat.numel() - (last ? kTotalsSlots : 0);
      if (pre_reduction_norm_weight_) {
        auto sum = torch::zeros({}, flat.options().dtype(torch::kFloat64));
        for (const BucketSlice& slice : slices_[bucket]) {
          const at::Tensor weight = pre_reduction_norm_weight_(slice.parameter);
          sum += (flat.narrow(0, slice.offset, slice.numel) * weight.reshape({-1}))
                     .to(torch::kFloat64)
                     .pow(2)
                     .sum();
        }
        local_sq_norm_ += sum.item<double>();
      } else {
        local_sq_norm_ +=
            flat.narrow(0, 0, gradients).to(torch::kFloat64).pow(2).sum().item<double>();
      }
      if (last)
        totals()[kSmallSqNorm].add_(local_sq_norm_ * pre_reduction_norm_scale_);
    }
    std::vector<at::Tensor> one{buckets_[bucket]};
    in_flight_.push_back(group_for(buckets_[bucket])->allreduce(one));
    ++calls_;
  }

  // Gloo for host tensors (the set-up checks, a CPU run's gradients), NCCL for a GPU's.
  CollectiveBackend* group_for(const at::Tensor& tensor) {
#ifdef USE_C10D_NCCL
    if (tensor.is_cuda()) {
      if (!nccl_) {
        nccl_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(
            c10::make_intrusive<c10d::PrefixStore>("nccl", store_), static_cast<int>(env_.rank),
            static_cast<int>(env_.world_size));
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
        // The rank's own GPU (device/device.h made it current): NCCL's communicator and any
        // device-less call (a barrier) use it rather than guessing rank % GPUs.
        nccl_->setBoundDeviceId(tensor.device());
#endif
      }
      return nccl_.get();
    }
#endif
    if (tensor.is_cuda()) {
      throw Error(ErrorKind::Distributed,
                  "ranks on CUDA devices need NCCL, and this bigbatch was built without it (the "
                  "NCCL headers were not found when it was configured)",
                  "build against a CUDA libtorch with nccl.h on the include path "
                  "(docs/gpu.md), or train the ranks with --device cpu");
    }
    return gloo_.get();
  }

  DistEnvironment env_;
  CollectiveOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<::gloo::transport::Device> gloo_device_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> side_;  // open_side_channel()
#ifdef USE_C10D_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl_;
#endif
  std::vector<at::Tensor> buckets_;
  // Where each parameter's gradient lies in its bucket (index: its position in attach()'s).
  struct BucketSlice {
    size_t parameter = 0;
    int64_t offset = 0;
    int64_t numel = 0;
  };
  std::vector<std::vector<BucketSlice>> slices_;
  std::vector<int64_t> parameters_in_bucket_;
  std::vector<GradAccumulator> accumulators_;  // hooks live as long as these
  bool armed_ = false;                         // inside a window's last backward pass
  std::vector<int64_t> pending_;               // parameters per bucket still to become final
  size_t next_launch_ = 0;
  std::vector<c10::intrusive_ptr<c10d::Work>> in_flight_;
  int64_t calls_ = 0;
  double pre_reduction_norm_scale_ = 0;  // > 0: measure local_sq_norm_ (WindowTotals)
  std::function<at::Tensor(size_t)> pre_reduction_norm_weight_;
  double local_sq_norm_ = 0;  // this rank's gradients before the all-reduce, squared
};

}  // namespace

std::unique_ptr<GradientReducer> make_collective_reducer(const DistEnvironment& env,
                                                         const CollectiveOptions& options) {
  return std::make_unique<CollectiveReducer>(env, options);
}

}  // namespace bigbatch

#else  // BIGBATCH_NO_COLLECTIVES: built without libtorch's Gloo headers

namespace bigbatch {

std::unique_ptr<GradientReducer> make_collective_reducer(const DistEnvironment& env,
                                                         const CollectiveOptions&) {
  throw Error(ErrorKind::Distributed,
              "rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
                  ": this bigbatch was built without data parallelism (libtorch's Gloo headers "
                  "were not found when it was configured)",
              "run a single process, or rebuild with Gloo's headers on the include path "
              "(Debian: libgloo-dev)");
}

}  // namespace bigbatch

#endif
