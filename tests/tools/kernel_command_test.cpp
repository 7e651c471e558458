// `cohort kernel keygen|list`: key files made once and never overwritten,
// and the registry's kernels listed with their typed signatures.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <sys/stat.h>

#include "kernels/bundle/signing.hpp"
#include "kernels/registry.hpp"
#include "tests/runtime_fixture.hpp"
#include "tests/tools/cli_fixture.hpp"
#include "tools/kernel_command.hpp"

using namespace cohort;
using namespace cohort::test;

namespace {

cli_result kernel_in_process(const std::vector<std::string>& words) {
  char* buf = nullptr;
  size_t size = 0;
  std::FILE* out = ::open_memstream(&buf, &size);
  REQUIRE(out != nullptr);
  cli_result res;
  res.status = tools::run_kernel(words, out);
  std::fclose(out);
  res.output.assign(buf, size);
  std::free(buf);
  return res;
}

std::string slurp(const std::string& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

} // namespace

TEST_CASE("kernel keygen writes a key pair once", "[tools][kernel]") {
  temp_dir dir;
  auto prefix = dir.file("signer");
  auto res = kernel_in_process({"keygen", prefix});
  REQUIRE(res.status == 0);
  auto priv = kernels::bundle::private_key::from_pem(slurp(prefix + ".key"));
  auto pub = kernels::bundle::public_key::from_pem(slurp(prefix + ".pub"));
  REQUIRE(priv);
  REQUIRE(pub);
  CHECK(priv->public_key().raw() == pub->raw());
  CHECK(res.output.find("key " + pub->id()) == 0);
  struct stat st {};
  REQUIRE(::stat((prefix + ".key").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  // A second keygen to the same place refuses and leaves the keys alone.
  auto again = kernel_in_process({"keygen", prefix});
  CHECK(again.status == tools::exit_bad_input);
  auto still = kernels::bundle::public_key::from_pem(slurp(prefix + ".pub"));
  REQUIRE(still);
  CHECK(still->raw() == pub->raw());
  // An unwritable place is bad input, not a crash.
  CHECK(kernel_in_process({"keygen", "/nonexistent/dir/k"}).status ==
        tools::exit_bad_input);
  CHECK(kernel_in_process({"keygen"}).status == tools::exit_bad_input);
}

TEST_CASE("kernel list prints every kernel with its signature",
          "[tools][kernel]") {
  kernels::kernel_def d;
  d.name = "test.listed";
  d.signature.inputs = {{"points", kernels::dtype::f64},
                        {"ids", kernels::dtype::i32}};
  d.signature.output = {"inside", kernels::dtype::u8};
  d.output_elements = [](const kernels::kernel_args&,
                         kernels::input_lengths in) { return in[1]; };
  d.cpu = [](const kernels::kernel_args&, kernels::typed_inputs) {
    return kernels::kernel_output{};
  };
  std::string why;
  if (!kernels::parse_kernel("test.listed"))
    REQUIRE(kernels::register_kernel(d, why));
  auto res = kernel_in_process({"list"});
  REQUIRE(res.status == 0);
  CHECK(res.output.find("gemm") != std::string::npos);
  CHECK(res.output.find("a:f32, b:f32") != std::string::npos);
  CHECK(res.output.find("points:f64, ids:i32") != std::string::npos);
  CHECK(res.output.find("inside:u8") != std::string::npos);
  auto json = kernel_in_process({"list", "--json"});
  REQUIRE(json.status == 0);
  CHECK(json.output.find("{\"name\":\"axpy\",\"id\":1,\"builtin\":true,"
                         "\"origin\":\"built-in\"") != std::string::npos);
  CHECK(json.output.find("\"name\":\"test.listed\"") != std::string::npos);
  CHECK(json.output.find("\"output\":{\"name\":\"inside\",\"dtype\":\"u8\"}") !=
        std::string::npos);
  size_t lines = 0;
  for (char c : json.output)
    lines += c == '\n';
  CHECK(lines == kernels::registered_kernels().size());
  CHECK(kernel_in_process({"list", "--bogus"}).status == tools::exit_bad_input);
}
