#include "devices/memory/device_memory.hpp"

#include "messages/errc.hpp"

namespace cohort::devices::memory {

caf::expected<shared_region> memory_resource::do_share(const void*) {
  return make_error(errc::invalid_arguments,
                    "this device's memory cannot be shared with another "
                    "process");
}

caf::expected<std::unique_ptr<device_memory>>
device_memory::make(std::string device, bool simulated, uint64_t capacity,
                    std::unique_ptr<memory_resource> upstream,
                    std::unique_ptr<stream_ordering> streams,
                    memory_options opts) {
  if (auto err = validate(opts.pool))
    return make_error(errc::invalid_arguments, device + ": " + describe(err));
  if (streams->streams() > pool_resource::max_streams)
    return make_error(errc::invalid_arguments,
                      device + ": " + std::to_string(streams->streams()) +
                          " streams; the pool orders at most " +
                          std::to_string(pool_resource::max_streams));
  auto reservations = opts.reservations;
  auto out = std::make_unique<device_memory>(
      std::move(device), simulated, capacity, std::move(upstream),
      std::move(streams), std::move(opts));
  if (auto err = out->take_reservations(reservations))
    return err;
  return out;
}

device_memory::device_memory(std::string device, bool simulated,
                             uint64_t capacity,
                             std::unique_ptr<memory_resource> upstream,
                             std::unique_ptr<stream_ordering> streams,
                             memory_options opts)
    : device_(std::move(device)), simulated_(simulated), capacity_(capacity),
      observer_(std::move(opts.observer)), upstream_(std::move(upstream)),
      streams_(std::move(streams)) {
  build(std::move(opts));
}

void device_memory::build(memory_options opts) {
  // A simulated GPU's slabs are fresh host mappings, which read zero; a
  // real GPU's driver does not clear memory.
  opts.pool.zero_new_slabs = opts.pool.zero_on_free && !simulated_;
  pool_ = std::make_unique<pool_resource>(*upstream_, *streams_, opts.pool);
  // A limit at or above the capacity is no limit: the device itself refuses
  // (hard OOM) before it could be reached.
  limiting_ = std::make_unique<limiting_adaptor>(
      *pool_, device_, opts.limit < capacity_ ? opts.limit : 0,
      std::move(opts.ledger));
  for (auto& [tenant, bytes] : opts.tenant_limits)
    limiting_->set_tenant_limit(tenant, bytes);
  faults_ = std::make_unique<fault_injection_adaptor>(*limiting_, device_);
  tracking_ = std::make_unique<tracking_adaptor>(*faults_, device_);
  statistics_ = std::make_unique<statistics_adaptor>(*tracking_);
}

caf::error device_memory::configure(memory_options opts) {
  if (tracking_->live_count() > 0)
    return make_error(errc::invalid_arguments,
                      device_ + ": memory options cannot change while " +
                          std::to_string(tracking_->live_count()) +
                          " allocations are live");
  if (auto err = validate(opts.pool))
    return make_error(errc::invalid_arguments, device_ + ": " + describe(err));
  if (opts.observer)
    observer_ = std::move(opts.observer);
  auto reservations = opts.reservations;
  tear_down();
  build(std::move(opts));
  return take_reservations(reservations);
}

caf::error device_memory::take_reservations(
    const std::map<std::string, uint64_t>& reservations) {
  for (auto& [tenant, bytes] : reservations)
    if (auto err = pool_->reserve(tenant, bytes)) {
      for (auto& [t, b] : reservations)
        pool_->reserve(t, 0);
      return make_error(errc::out_of_memory,
                        device_ + ": reserving " + std::to_string(bytes) +
                            " bytes for tenant '" + tenant +
                            "': " + describe(err));
    }
  return caf::none;
}

void device_memory::tear_down() {
  // Adaptors go first (they refer to the pool), the pool before its upstream.
  statistics_.reset();
  tracking_.reset();
  faults_.reset();
  limiting_.reset();
  pool_.reset();
}

device_memory::~device_memory() {
  tear_down();
}

caf::expected<void*> device_memory::allocate(size_t bytes, stream_ref stream,
                                             const owner_tag& owner) {
  auto p = statistics_->allocate(bytes, stream, owner);
  if (p && observer_)
    observer_->on_allocate(device_, *p, bytes, owner);
  return p;
}

caf::error device_memory::deallocate(void* p, size_t bytes, stream_ref stream) {
  if (observer_)
    observer_->on_deallocate(device_, p, bytes);
  return statistics_->deallocate(p, bytes, stream);
}

memory_snapshot device_memory::snapshot() const {
  memory_snapshot s;
  s.device = device_;
  s.simulated = simulated_;
  s.capacity = capacity_;
  s.limit = limiting_->limit() != 0 ? limiting_->limit() : capacity_;
  auto c = statistics_->counts();
  auto p = pool_->stats();
  s.used = c.current_bytes;
  s.peak_used = c.peak_bytes;
  s.held = p.held_bytes;
  s.peak_held = p.peak_held_bytes;
  s.free_in_pool = p.free_bytes;
  s.largest_free = p.largest_free;
  s.fragmentation = p.fragmentation();
  s.reserved = p.reserved_bytes;
  s.live_allocations = tracking_->live_count();
  s.allocations = c.allocations;
  s.deallocations = c.deallocations;
  s.invalid_frees = c.failed_deallocations;
  s.cache_hits = p.cache_hits;
  s.slab_allocations = p.slab_allocations;
  s.slab_releases = p.slab_releases;
  s.defragmentations = p.defragmentations;
  s.cross_stream_waits = p.cross_stream_waits;
  s.injected_failures = faults_->injected();
  s.dropped_at_reset = dropped_;
  s.refused = std::move(c.refused);
  s.used_by_tenant = limiting_->used_by_tenant();
  s.zero_on_free = pool_->options().zero_on_free;
  s.leak_report = tracking_->leak_report();
  return s;
}

std::string device_memory::reset(bool memory_gone) {
  auto report = tracking_->leak_report();
  if (observer_)
    observer_->on_reset(device_);
  dropped_ += tracking_->forget_all();
  statistics_->forget_all();
  limiting_->forget_all();
  pool_->reset(memory_gone);
  if (memory_gone)
    upstream_->forget_all();
  streams_->reset();
  return report;
}

} // namespace cohort::devices::memory
