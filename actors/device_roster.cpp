#include "actors/device_roster.hpp"

#include <mutex>

namespace cohort::actors {

device_roster::device_roster(std::vector<std::shared_ptr<devices::device>> devs)
    : devs_(std::move(devs)) {
  for (auto& d : devs_)
    infos_.push_back(d->info());
}

std::vector<std::shared_ptr<devices::device>> device_roster::devices() const {
  std::shared_lock<std::shared_mutex> guard{mtx_};
  return devs_;
}

std::vector<device_info> device_roster::infos() const {
  std::shared_lock<std::shared_mutex> guard{mtx_};
  return infos_;
}

std::shared_ptr<devices::device> device_roster::at(size_t index) const {
  std::shared_lock<std::shared_mutex> guard{mtx_};
  return index < devs_.size() ? devs_[index] : nullptr;
}

size_t device_roster::size() const {
  std::shared_lock<std::shared_mutex> guard{mtx_};
  return devs_.size();
}

size_t device_roster::add(std::shared_ptr<devices::device> dev) {
  auto info = dev->info();
  std::unique_lock<std::shared_mutex> guard{mtx_};
  devs_.push_back(std::move(dev));
  infos_.push_back(std::move(info));
  return devs_.size() - 1;
}

} // namespace cohort::actors
