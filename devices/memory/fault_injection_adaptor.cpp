#include "devices/memory/fault_injection_adaptor.hpp"

#include "messages/errc.hpp"

namespace cohort::devices::memory {

fault_injection_adaptor::fault_injection_adaptor(memory_resource& upstream,
                                                 std::string device)
    : upstream_(upstream), device_(std::move(device)) {
  // nop
}

void fault_injection_adaptor::fail_next(uint32_t n) {
  fail_next_ += n;
  armed_ = true;
}

void fault_injection_adaptor::fail_randomly(double probability, uint64_t seed) {
  std::lock_guard<std::mutex> guard{rng_mtx_};
  probability_ = probability > 0 ? std::min(probability, 1.0) : 0;
  rng_.seed(seed);
  if (probability_ > 0)
    armed_ = true;
}

void fault_injection_adaptor::fail_above(uint64_t bytes) {
  fail_above_ = bytes;
  if (bytes > 0)
    armed_ = true;
}

void fault_injection_adaptor::clear() {
  std::lock_guard<std::mutex> guard{rng_mtx_};
  armed_ = false;
  fail_next_ = 0;
  fail_above_ = 0;
  probability_ = 0;
}

caf::error fault_injection_adaptor::injected_error(size_t bytes,
                                                   const char* why) {
  ++injected_;
  return make_error(errc::out_of_memory,
                    device_ + ": allocation of " + std::to_string(bytes) +
                        " bytes refused (injected: " + why + ")");
}

caf::expected<void*>
fault_injection_adaptor::do_allocate(size_t bytes, stream_ref stream,
                                     const owner_tag& owner) {
  if (armed_.load(std::memory_order_relaxed)) {
    auto n = fail_next_.load();
    while (n > 0 && !fail_next_.compare_exchange_weak(n, n - 1)) {
      // retry
    }
    if (n > 0)
      return injected_error(bytes, "next allocations");
    if (auto above = fail_above_.load(); above > 0 && bytes > above)
      return injected_error(bytes, "larger than the injected limit");
    std::lock_guard<std::mutex> guard{rng_mtx_};
    if (probability_ > 0 &&
        std::uniform_real_distribution<double>{0, 1}(rng_) < probability_)
      return injected_error(bytes, "random failure");
  }
  return upstream_.allocate(bytes, stream, owner);
}

caf::error fault_injection_adaptor::do_deallocate(void* p, size_t bytes,
                                                  stream_ref stream) {
  return upstream_.deallocate(p, bytes, stream);
}

} // namespace cohort::devices::memory
