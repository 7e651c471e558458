// tools::terminal_text: what a terminal could act on is printed escaped,
// and `cohort audit show` / `query` print an ADMIN record that carried
// escape sequences without them.
#include <catch2/catch.hpp>

#include "tests/temp_dir.hpp"
#include "tests/tools/cli_fixture.hpp"
#include "tests/tools/served_fixture.hpp"
#include "tools/terminal_text.hpp"

using namespace cohort;
using cohort::tools::terminal_lines;
using cohort::tools::terminal_text;
using test::has;

TEST_CASE("terminal text escapes what a terminal acts on", "[tools]") {
  CHECK(terminal_text("plain tenant-1") == "plain tenant-1");
  // Clear the screen, set the window title, ring the bell.
  CHECK(terminal_text("\x1b[2J\x1b]0;pwned\a") == "\\e[2J\\e]0;pwned\\x07");
  CHECK(terminal_text("a\nb\tc\rd") == "a\\nb\\tc\\rd");
  CHECK(terminal_text(std::string{"n\0l", 3}) == "n\\x00l");
  CHECK(terminal_text("\x7f") == "\\x7f");
  // A backslash is doubled: "\e" typed by someone is not an ESC shown.
  CHECK(terminal_text("\\e") == "\\\\e");
  // C1's CSI (U+009B) in UTF-8, and as a lone byte (not UTF-8).
  CHECK(terminal_text("\xc2\x9b"
                      "2J") == "\\xc2\\x9b2J");
  CHECK(terminal_text("\x9b"
                      "2J") == "\\x9b2J");
  CHECK(terminal_text("\xff\xfe") == "\\xff\\xfe");
  // Overlong and truncated forms are not UTF-8.
  CHECK(terminal_text("\xc0\xaf") == "\\xc0\\xaf");
  CHECK(terminal_text("\xe2\x82") == "\\xe2\\x82");
  // A right-to-left override would reorder what follows on the line.
  CHECK(terminal_text("abc\xe2\x80\xae"
                      "def") == "abc\\u{202e}def");
  // UTF-8 text passes.
  CHECK(
      terminal_text("caf\xc3\xa9 \xe8\xa8\x88\xe7\xae\x97 \xf0\x9f\x9a\x80") ==
      "caf\xc3\xa9 \xe8\xa8\x88\xe7\xae\x97 \xf0\x9f\x9a\x80");
  // Many lines: newlines, tabs and backslashes (JSON's escapes) pass.
  CHECK(terminal_lines("{\n\t\"a\": \"\\u001b\"\x1b[2J\n}") ==
        "{\n\t\"a\": \"\\u001b\"\\e[2J\n}");
}

TEST_CASE_METHOD(test::served,
                 "an audit record carrying escape sequences is shown escaped",
                 "[tools][serve][http]") {
  start(test::make_config(dir, 1, {{"sim0", 1}}));
  // The raw bytes in the request's path, as a client may send them.
  auto r = post("/v1/tenants/\x1b[2J\x1b]0;pwned\a/cancel", "");
  REQUIRE(r);
  CHECK(r->status == 404);
  auto flushed = rt->flush_audit();
  REQUIRE(flushed);
  auto log = dir.file("audit.log");
  REQUIRE(has(test::slurp(log), "\x1b[2J"));
  for (auto cmd : {"audit show ", "audit query --kind ADMIN "}) {
    auto out = test::cohort_cli(cmd + log);
    INFO(cmd << ": " << out.output);
    CHECK(out.status == 0);
    CHECK(has(out.output, "cancel tenant \\e[2J\\e]0;pwned\\x07"));
    CHECK(out.output.find('\x1b') == std::string::npos);
    CHECK(out.output.find('\a') == std::string::npos);
  }
}
