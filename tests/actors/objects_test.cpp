// Device-resident objects through the runtime facade: what a lost device
// takes with it (copies with a host copy survive, the others are lost and
// their readers end with object_lost), the memory given back, and the
// audit records.
#include "tests/runtime_fixture.hpp"

#include <thread>

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
uint64_t sim0_used(runtime& r) {
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

} // namespace

TEST_CASE_METHOD(fixture, "a lost device takes the objects only it held",
                 "[actors][objects]") {
  auto cfg = test::make_config(dir, 1, {{"sim0", 1.0}});
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  std::vector<float> x(50000, 1.5f);
  // One object put from the host (it keeps a host copy) ...
  auto put = r.put_object("t", host_buffer{x}, "sim0");
  REQUIRE(put);
  CHECK(put->devices == std::vector<std::string>{"sim0"});
  // ... and one an item kept on sim0 (no host copy).
  auto keep = item_of(1, kernel_id::axpy, {name_of(*put), host_buffer{x}});
  keep.keep_on_device = true;
  auto kept = r.run(keep);
  REQUIRE(kept);
  REQUIRE(kept->object.id != 0);
  CHECK(kept->device == "sim0");
  CHECK(kept->object.devices == std::vector<std::string>{"sim0"});
  CHECK_FALSE(kept->object.host_copy);
  CHECK(sim0_used(r) >= 2 * x.size() * sizeof(float));
  // sim0 is lost and comes back after its reset.
  r.sim_device("sim0")->lose(false);
  std::vector<object_info> list;
  for (int i = 0; i < 400; ++i) {
    auto l = r.objects();
    REQUIRE(l);
    list = *l;
    auto* k = find(list, kept->object.id);
    if (k != nullptr && k->devices.empty())
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto* p = find(list, put->id);
  auto* k = find(list, kept->object.id);
  REQUIRE(p != nullptr);
  REQUIRE(k != nullptr);
  CHECK(p->devices.empty());
  CHECK(p->host_copy);
  CHECK(k->devices.empty());
  CHECK_FALSE(k->host_copy);
  // The put object is read from its host copy; the kept one is gone.
  auto ok = r.run(item_of(2, kernel_id::reduce_sum, {name_of(*put)}));
  REQUIRE(ok);
  CHECK(ok->output.values[0] == Approx(1.5 * double(x.size())));
  auto lost = r.run(item_of(3, kernel_id::reduce_sum, {name_of(kept->object)}));
  REQUIRE_FALSE(lost);
  CHECK(code_of(lost.error()) == errc::object_lost);
  auto got = r.get_object("t", kept->object.id);
  REQUIRE_FALSE(got);
  CHECK(code_of(got.error()) == errc::object_lost);
  // Released, both go from the directory; the reset device holds nothing.
  r.release_object(put->id);
  r.release_object(kept->object.id);
  for (int i = 0; i < 400; ++i) {
    auto l = r.objects();
    REQUIRE(l);
    if (l->empty())
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(r.objects()->empty());
  r.stop();
  auto recs = test::read_audit(dir.file("audit.log"));
  std::vector<std::string> objects;
  for (auto& rec : recs)
    if (rec.kind() == pb::OBJECT)
      objects.push_back(rec.detail());
  auto has = [&](const std::string& what) {
    for (auto& d : objects)
      if (d.find(what) != std::string::npos)
        return true;
    return false;
  };
  CHECK(has("stored"));
  CHECK(has("made from item 1's output, kept on sim0"));
  CHECK(has("lost with the device"));
  CHECK(has("freed"));
}

TEST_CASE_METHOD(fixture, "handles and items hold an object until both let go",
                 "[actors][objects]") {
  auto cfg = test::make_config(dir, 1, {{"sim0", 1.0}});
  auto rt = runtime::start(sys, cfg);
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
  auto rt = runtime::start(sys, cfg);
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
