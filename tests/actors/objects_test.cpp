// Device-resident objects through the runtime facade: what a lost device
// takes with it (copies with a host copy survive, outputs kept on a device
// are made again by re-running their items, the others are lost and their
// readers end with object_lost), the memory given back, and the audit
// records.
#include "tests/runtime_fixture.hpp"

#include <functional>
#include <thread>

#include "cohort/client.hpp"

using namespace cohort;
using namespace cohort::actors;

namespace {

using fixture = test::actor_fixture;

work_item item_of(uint64_t id, kernel_id k, std::vector<host_buffer> in) {
  work_item w;
  w.id = id;
  w.tenant = "t";
  w.kernel = k;
  w.inputs = std::move(in);
  return w;
}

host_buffer name_of(const object_info& o) {
  return host_buffer::object(o.id, o.elements, o.type);
}

// What tenant "t" holds of sim0's memory now.
uint64_t sim0_used(actors::runtime& r) {
  auto m = r.memory_stats();
  REQUIRE(m);
  for (auto& s : *m)
    if (s.device == "sim0")
      return s.used_by_tenant["t"];
  FAIL("no sim0 in the memory stats");
  return 0;
}

const object_info* find(const std::vector<object_info>& list, uint64_t id) {
  for (auto& o : list)
    if (o.id == id)
      return &o;
  return nullptr;
}

// Waits until `pred` holds for the object list (up to 4 s).
bool objects_become(
    actors::runtime& r,
    const std::function<bool(const std::vector<object_info>&)>& pred) {
  for (int i = 0; i < 800; ++i) {
    auto l = r.objects();
    REQUIRE(l);
    if (pred(*l))
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

std::vector<std::string> object_records(const test::temp_dir& dir) {
  std::vector<std::string> out;
  for (auto& rec : test::read_audit(dir.file("audit.log")))
    if (rec.kind() == pb::OBJECT)
      out.push_back(rec.detail());
  return out;
}

bool has_record(const std::vector<std::string>& records,
                const std::string& what) {
  for (auto& d : records)
    if (d.find(what) != std::string::npos)
      return true;
  return false;
}

// Another process's write in place: a read-write export of object `id`,
// attached through the share socket, its first element set to `value`.
void write_first_element(actors::runtime& r, uint64_t id, float value) {
  share_grant rw;
  rw.write = true;
  auto token = r.export_object("t", id, rw);
  REQUIRE(token);
  auto at = cohort::client::attachment::attach(r.share_socket(), *token, true);
  static_cast<float*>(at.mutable_data())[0] = value;
  at.detach();
}

// An output kept on a device: item 1, axpy of `x` with itself (alpha 1,
// so each element is 2x), with no host copy.
object_info kept_axpy(actors::runtime& r, const std::vector<float>& x) {
  auto keep = item_of(1, kernel_id::axpy, {host_buffer{x}, host_buffer{x}});
  keep.keep_on_device = true;
  auto kept = r.run(keep);
  REQUIRE(kept);
  return kept->object;
}

// Object `id` as the runtime lists it now.
object_info listed(actors::runtime& r, uint64_t id) {
  auto l = r.objects();
  REQUIRE(l);
  auto* k = find(*l, id);
  REQUIRE(k != nullptr);
  return *k;
}

double sum_of(actors::runtime& r, uint64_t id, const object_info& o) {
  auto res = r.run(item_of(id, kernel_id::reduce_sum, {name_of(o)}));
  REQUIRE(res);
  return res->output.values[0];
}

} // namespace

TEST_CASE_METHOD(fixture,
                 "a lost device's objects: host copies stay, kept outputs are "
                 "made again by their items",
                 "[actors][objects]") {
  auto cfg = test::make_config(dir, 1, {{"sim0", 1.0}});
  auto rt = actors::runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  std::vector<float> x(50000, 1.5f);
  // One object put from the host (it keeps a host copy) ...
  auto put = r.put_object("t", host_buffer{x}, "sim0");
  REQUIRE(put);
  CHECK(put->devices == std::vector<std::string>{"sim0"});
  // ... one an item kept on sim0 (no host copy) ...
  auto keep = item_of(1, kernel_id::axpy, {name_of(*put), host_buffer{x}});
  keep.args.alpha = 2.0f;
  keep.keep_on_device = true;
  auto kept = r.run(keep);
  REQUIRE(kept);
  REQUIRE(kept->object.id != 0);
  CHECK(kept->device == "sim0");
  CHECK(kept->object.devices == std::vector<std::string>{"sim0"});
  CHECK_FALSE(kept->object.host_copy);
  // ... and one made from that one: a chain of two.
  auto next =
      item_of(2, kernel_id::axpy, {name_of(kept->object), host_buffer{x}});
  next.keep_on_device = true;
  auto chained = r.run(next);
  REQUIRE(chained);
  REQUIRE(chained->object.id != 0);
  CHECK_FALSE(chained->object.host_copy);
  auto a = kept->object;
  auto b = chained->object;
  double n = double(x.size());
  double sum_a = (2.0 * 1.5 + 1.5) * n;
  double sum_b = (1.0 * 4.5 + 1.5) * n;
  CHECK(sum_of(r, 3, a) == Approx(sum_a));
  CHECK(sum_of(r, 4, b) == Approx(sum_b));
  auto used = sim0_used(r);
  CHECK(used >= 3 * x.size() * sizeof(float));
  // sim0 is lost and comes back after its reset: the put object goes back
  // to its host copy, the kept ones are made again there by re-running
  // items 1 and 2 (in that order: item 2 reads item 1's output).
  r.sim_device("sim0")->lose(false);
  CHECK(sum_of(r, 5, b) == Approx(sum_b));
  CHECK(sum_of(r, 6, a) == Approx(sum_a));
  CHECK(sum_of(r, 7, *put) == Approx(1.5 * n));
  auto got = r.get_object("t", b.id);
  REQUIRE(got);
  CHECK(got->size() == x.size());
  REQUIRE(objects_become(r, [&](const std::vector<object_info>& l) {
    auto* ka = find(l, a.id);
    auto* kb = find(l, b.id);
    return ka != nullptr && kb != nullptr &&
           ka->devices == std::vector<std::string>{"sim0"} &&
           kb->devices == std::vector<std::string>{"sim0"};
  }));
  auto list = *r.objects();
  CHECK_FALSE(find(list, a.id)->host_copy);
  CHECK_FALSE(find(list, b.id)->host_copy);
  CHECK(find(list, put->id)->devices.empty());
  CHECK(find(list, put->id)->host_copy);
  // The copies made again are charged as before, less the put object's.
  CHECK(sim0_used(r) >= 2 * x.size() * sizeof(float));
  // An object that a kept one was made from stays while that one may
  // need it: released, the put object and the first kept one stay ...
  r.release_object(put->id);
  r.release_object(a.id);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(r.objects()->size() == 3);
  // ... until the last one made from them goes.
  r.release_object(b.id);
  CHECK(objects_become(
      r, [](const std::vector<object_info>& l) { return l.empty(); }));
  CHECK(sim0_used(r) == 0);
  r.stop();
  auto records = object_records(dir);
  CHECK(has_record(records, "stored"));
  CHECK(has_record(records, "made from item 1's output, kept on sim0"));
  CHECK(has_record(records, "its copy here went with the device"));
  CHECK(has_record(records, "item 1, which made it, runs again"));
  CHECK(has_record(records, "item 2, which made it, runs again"));
  CHECK(has_record(records, "made again on sim0 by re-running item 1"));
  CHECK(has_record(records, "made again on sim0 by re-running item 2"));
  CHECK(has_record(records, "freed"));
}

TEST_CASE_METHOD(fixture,
                 "a kept object whose device goes for good is made again "
                 "where the fleet can",
                 "[actors][objects]") {
  auto cfg = test::make_config(dir, 1, {{"sim0", 1.0}, {"sim1", 1.0}});
  auto rt = actors::runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  std::vector<float> x(20000, 0.5f);
  auto o = kept_axpy(r, x);
  REQUIRE(o.devices.size() == 1);
  auto gone = o.devices[0];
  auto other = gone == "sim0" ? "sim1" : "sim0";
  // A get while the item re-runs (slowly) on the other GPU waits for it.
  r.sim_device(other)->slow_down(200);
  r.sim_device(gone)->lose(true);
  REQUIRE(objects_become(r, [&](const std::vector<object_info>& l) {
    auto* k = find(l, o.id);
    return k != nullptr && k->devices.empty();
  }));
  auto got = r.get_object("t", o.id);
  REQUIRE(got);
  REQUIRE(got->size() == x.size());
  CHECK(got->view().as<float>()[123] == 1.0f);
  r.sim_device(other)->slow_down(1);
  // Items follow the object to the other GPU.
  auto res = r.run(item_of(2, kernel_id::reduce_sum, {name_of(o)}));
  REQUIRE(res);
  CHECK(res->device == other);
  CHECK(res->output.values[0] == Approx(1.0 * double(x.size())));
  CHECK(objects_become(r, [&](const std::vector<object_info>& l) {
    auto* k = find(l, o.id);
    return k != nullptr && k->devices == std::vector<std::string>{other};
  }));
}

TEST_CASE_METHOD(fixture,
                 "a kept object written in place cannot be made again: its "
                 "readers end with object_lost",
                 "[actors][objects]") {
  auto cfg = test::make_config(dir, 1, {{"sim0", 1.0}});
  cfg.set_share_socket(dir.file("share.sock"));
  auto rt = actors::runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  std::vector<float> x(1000, 1.0f);
  auto o = kept_axpy(r, x);
  write_first_element(r, o.id, 100.0f);
  CHECK(sum_of(r, 2, o) == Approx(2.0 * 999 + 100.0));
  r.sim_device("sim0")->lose(false);
  auto lost = r.run(item_of(3, kernel_id::reduce_sum, {name_of(o)}));
  REQUIRE_FALSE(lost);
  CHECK(code_of(lost.error()) == errc::object_lost);
  auto got = r.get_object("t", o.id);
  REQUIRE_FALSE(got);
  CHECK(code_of(got.error()) == errc::object_lost);
  r.release_object(o.id);
  CHECK(objects_become(
      r, [](const std::vector<object_info>& l) { return l.empty(); }));
  r.stop();
  CHECK(has_record(object_records(dir), "lost with the device: no other copy"));
}

TEST_CASE_METHOD(fixture, "handles and items hold an object until both let go",
                 "[actors][objects]") {
  auto cfg = test::make_config(dir, 1, {{"sim0", 1.0}});
  auto rt = actors::runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  std::vector<float> x(1000, 2.0f);
  auto obj = r.put_object("t", host_buffer{x});
  REQUIRE(obj);
  // Many items read it at once while its only handle is released: each
  // still ends with its result, and the object goes after the last.
  r.sim_device("sim0")->slow_down(50);
  std::vector<work_future> futures;
  for (uint64_t i = 0; i < 20; ++i)
    futures.push_back(
        r.submit(item_of(10 + i, kernel_id::nrm2, {name_of(*obj)})));
  r.release_object(obj->id);
  for (auto& f : futures) {
    auto res = f.get();
    REQUIRE(res);
    CHECK(res->output.values[0] == Approx(std::sqrt(4.0 * 1000)));
  }
  for (int i = 0; i < 400 && !r.objects()->empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(r.objects()->empty());
  CHECK(sim0_used(r) == 0);
}

TEST_CASE_METHOD(fixture, "an end the caller never takes releases its object",
                 "[actors][objects]") {
  auto cfg = test::make_config(dir, 1, {{"sim0", 1.0}});
  auto rt = actors::runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  std::vector<float> x(1000, 1.0f);
  auto keep = item_of(1, kernel_id::axpy, {host_buffer{x}, host_buffer{x}});
  keep.keep_on_device = true;
  {
    auto f = r.submit(keep);
    REQUIRE(f.wait_for(std::chrono::seconds(20)));
    CHECK(r.objects()->size() == 1);
    // Dropped without get: its object's handle goes with it.
  }
  for (int i = 0; i < 400 && !r.objects()->empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(r.objects()->empty());
  CHECK(sim0_used(r) == 0);
  // A timed run that gives up may still see the end come in: the end is
  // then dropped with its object.
  keep.id = 2;
  r.sim_device("sim0")->slow_down(2000);
  auto late = r.run(keep, std::chrono::milliseconds(1));
  REQUIRE_FALSE(late);
  CHECK(code_of(late.error()) == errc::timed_out);
  r.sim_device("sim0")->slow_down(1);
  for (int i = 0; i < 1000 && !r.objects()->empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(r.objects()->empty());
}

TEST_CASE_METHOD(fixture,
                 "an object read from its host copy on a busy device's "
                 "sibling is replicated there",
                 "[actors][objects]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1.0}, {"sim1", 1.0}});
  auto rt = actors::runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  std::vector<float> x(1 << 18, 0.25f);
  auto obj = r.put_object("t", host_buffer{x}, "sim0");
  REQUIRE(obj);
  REQUIRE(obj->devices == std::vector<std::string>{"sim0"});
  // sim0 is slow: waiting for it costs more than moving the object, so
  // items go to sim1 too, reading the host copy there; the second stores
  // a copy on sim1.
  r.sim_device("sim0")->slow_down(500);
  std::vector<work_future> futures;
  for (uint64_t i = 0; i < 24; ++i)
    futures.push_back(
        r.submit(item_of(100 + i, kernel_id::reduce_sum, {name_of(*obj)})));
  size_t on_sim1 = 0;
  for (auto& f : futures) {
    auto res = f.get();
    REQUIRE(res);
    CHECK(res->output.values[0] == Approx(0.25 * double(x.size())));
    on_sim1 += res->device == "sim1" ? 1 : 0;
  }
  REQUIRE(on_sim1 >= 2);
  CHECK(objects_become(r, [&](const std::vector<object_info>& l) {
    auto* o = find(l, obj->id);
    return o != nullptr &&
           o->devices == std::vector<std::string>{"sim0", "sim1"};
  }));
  r.sim_device("sim0")->slow_down(1);
  // The replica is charged to the tenant on sim1, and goes with the object.
  auto m = r.memory_stats();
  REQUIRE(m);
  for (auto& s : *m)
    if (s.device == "sim1")
      CHECK(s.used_by_tenant["t"] >= x.size() * sizeof(float));
  r.release_object(obj->id);
  CHECK(objects_become(
      r, [](const std::vector<object_info>& l) { return l.empty(); }));
  r.stop();
  CHECK(has_record(object_records(dir), "replicated from its host copy"));
}

TEST_CASE_METHOD(fixture,
                 "an output kept on a real CUDA GPU is made again after the "
                 "GPU is taken offline and back",
                 "[actors][objects][gpu][cuda]") {
  auto cfg = test::make_config(dir, 1, {});
  cfg.mutable_devices()->set_gpus(true);
  auto rt = actors::runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  std::string gpu;
  for (auto& d : r.devices())
    if (d.kind == device_kind::cuda_gpu && gpu.empty())
      gpu = d.name;
  if (gpu.empty()) {
    WARN("SKIPPED objects made again on a real GPU: no CUDA GPU on this "
         "machine");
    return;
  }
  std::vector<float> x(1 << 20, 0.5f);
  auto keep = item_of(1, kernel_id::axpy, {host_buffer{x}, host_buffer{x}});
  keep.args.alpha = 3.0f;
  keep.keep_on_device = true;
  auto kept = r.run(keep);
  REQUIRE(kept);
  auto o = kept->object;
  REQUIRE(o.devices == std::vector<std::string>{gpu});
  double expect = 2.0 * double(x.size());
  CHECK(sum_of(r, 2, o) == Approx(expect));
  // Offline, its copy goes; the re-run waits for a GPU, which comes back.
  auto started = std::chrono::steady_clock::now();
  REQUIRE_FALSE(r.set_offline(gpu));
  REQUIRE(objects_become(r, [&](const std::vector<object_info>& l) {
    auto* k = find(l, o.id);
    return k != nullptr && k->devices.empty();
  }));
  REQUIRE_FALSE(r.set_online(gpu));
  auto res = r.run(item_of(3, kernel_id::reduce_sum, {name_of(o)}));
  REQUIRE(res);
  CHECK(res->device == gpu);
  CHECK(res->output.values[0] == Approx(expect));
  auto took = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - started)
                  .count();
  auto k = listed(r, o.id);
  CHECK(k.devices == std::vector<std::string>{gpu});
  CHECK_FALSE(k.host_copy);
  WARN("a 4 MiB output kept on " << gpu << " was made again and read " << took
                                 << " ms after the GPU went offline");
  r.release_object(o.id);
  CHECK(objects_become(
      r, [](const std::vector<object_info>& l) { return l.empty(); }));
}

TEST_CASE_METHOD(fixture,
                 "an item reading kept objects on different devices runs "
                 "once one is read back to host memory",
                 "[actors][objects]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1.0}, {"sim1", 1.0}});
  auto rt = actors::runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  std::vector<float> x(4096, 1.0f);
  auto status_of = [&](const std::string& name) {
    auto st = r.placement_stats();
    REQUIRE(st);
    for (auto& d : st->devices)
      if (d.name == name)
        return d.status;
    FAIL("no device " << name);
    return device_status::offline;
  };
  auto wait_status = [&](const std::string& name, device_status want) {
    for (int i = 0; i < 400 && status_of(name) != want; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    REQUIRE(status_of(name) == want);
  };
  auto keep_on = [&](uint64_t id, const std::string& other) {
    // The other GPU drains (taken offline, it would lose its copies): the
    // output is kept where this one is.
    REQUIRE_FALSE(r.drain(other));
    wait_status(other, device_status::draining);
    auto keep = item_of(id, kernel_id::axpy, {host_buffer{x}, host_buffer{x}});
    keep.keep_on_device = true;
    auto kept = r.run(keep);
    REQUIRE(kept);
    REQUIRE_FALSE(r.set_online(other));
    wait_status(other, device_status::available);
    return kept->object;
  };
  auto a = keep_on(1, "sim1");
  auto b = keep_on(2, "sim0");
  REQUIRE(a.devices == std::vector<std::string>{"sim0"});
  REQUIRE(b.devices == std::vector<std::string>{"sim1"});
  // No device holds both, and neither has a host copy: one goes to host
  // memory first, then the item runs where the other is.
  auto both = item_of(3, kernel_id::dot, {name_of(a), name_of(b)});
  auto res = r.run(both);
  INFO((res ? std::string{"ok"} : describe(res.error())));
  REQUIRE(res);
  CHECK(res->output.values[0] == Approx(4.0 * double(x.size())));
  auto l = r.objects();
  REQUIRE(l);
  auto* ka = find(*l, a.id);
  auto* kb = find(*l, b.id);
  REQUIRE(ka != nullptr);
  REQUIRE(kb != nullptr);
  INFO("ran on " << res->device << "; a on " << ka->devices.size()
                 << " devices, host " << ka->host_copy << "; b on "
                 << kb->devices.size() << ", host " << kb->host_copy);
  CHECK(ka->host_copy != kb->host_copy);
  r.release_object(a.id);
  r.release_object(b.id);
  r.stop();
  CHECK(has_record(object_records(dir), "spilled to host memory"));
}

TEST_CASE_METHOD(fixture,
                 "an object made from one written in place cannot be made "
                 "again",
                 "[actors][objects]") {
  auto cfg = test::make_config(dir, 1, {{"sim0", 1.0}});
  cfg.set_share_socket(dir.file("share.sock"));
  auto rt = actors::runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  std::vector<float> x(1000, 1.0f);
  auto put = r.put_object("t", host_buffer{x}, "sim0");
  REQUIRE(put);
  auto keep = item_of(1, kernel_id::axpy, {name_of(*put), host_buffer{x}});
  keep.keep_on_device = true;
  auto kept = r.run(keep);
  REQUIRE(kept);
  // The object it was made from is written in place: the kept one's item
  // would now make something else.
  write_first_element(r, put->id, 50.0f);
  r.sim_device("sim0")->lose(false);
  auto lost = r.run(item_of(2, kernel_id::reduce_sum, {name_of(kept->object)}));
  REQUIRE_FALSE(lost);
  CHECK(code_of(lost.error()) == errc::object_lost);
  r.release_object(put->id);
  r.release_object(kept->object.id);
  CHECK(objects_become(
      r, [](const std::vector<object_info>& l) { return l.empty(); }));
}

TEST_CASE_METHOD(fixture,
                 "a kept object on a busy device is copied to an idle one "
                 "when that is sooner than waiting",
                 "[actors][objects]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1.0}, {"sim1", 1.0}});
  auto rt = actors::runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  std::vector<float> x(1 << 16, 0.5f);
  auto o = kept_axpy(r, x);
  REQUIRE(o.devices.size() == 1);
  auto holder = o.devices[0];
  auto other = holder == "sim0" ? "sim1" : "sim0";
  // The other device has run the kernel on host data of that size: the
  // model knows its rate.
  bool measured = false;
  for (uint64_t i = 0; i < 16 && !measured; ++i) {
    auto res = r.run(item_of(50 + i, kernel_id::reduce_sum, {host_buffer{x}}));
    REQUIRE(res);
    measured = res->device == other;
  }
  REQUIRE(measured);
  // Its device is very slow now: items queue there, while the other is
  // idle. The object has no host copy, so it is copied device to device.
  r.sim_device(holder)->slow_down(2000);
  // Two items there measure it slow (the only device that may run them).
  for (uint64_t i = 0; i < 2; ++i) {
    auto res = r.run(item_of(90 + i, kernel_id::reduce_sum, {name_of(o)}));
    REQUIRE(res);
    CHECK(res->device == holder);
  }
  std::vector<work_future> futures;
  for (uint64_t i = 0; i < 24; ++i)
    futures.push_back(
        r.submit(item_of(100 + i, kernel_id::reduce_sum, {name_of(o)})));
  size_t on_other = 0;
  for (auto& f : futures) {
    auto res = f.get();
    REQUIRE(res);
    CHECK(res->output.values[0] == Approx(1.0 * double(x.size())));
    on_other += res->device == other ? 1 : 0;
  }
  CHECK(on_other > 0);
  auto k = listed(r, o.id);
  CHECK(k.devices.size() == 2);
  CHECK_FALSE(k.host_copy);
  r.sim_device(holder)->slow_down(1);
  r.release_object(o.id);
  CHECK(objects_become(
      r, [](const std::vector<object_info>& l) { return l.empty(); }));
  r.stop();
  CHECK(has_record(object_records(dir), "copied from " + holder));
}

TEST_CASE_METHOD(fixture,
                 "a kept object is not copied while its device keeps up",
                 "[actors][objects]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1.0}, {"sim1", 1.0}});
  auto rt = actors::runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  std::vector<float> x(1 << 16, 0.5f);
  auto o = kept_axpy(r, x);
  REQUIRE(o.devices.size() == 1);
  // One at a time: nothing queues on the device that holds it, so a copy
  // could only cost time.
  for (uint64_t i = 0; i < 8; ++i) {
    auto res = r.run(item_of(100 + i, kernel_id::reduce_sum, {name_of(o)}));
    REQUIRE(res);
    CHECK(res->device == o.devices[0]);
  }
  CHECK(listed(r, o.id).devices.size() == 1);
  r.release_object(o.id);
  r.stop();
  CHECK_FALSE(has_record(object_records(dir), "copied from"));
}
