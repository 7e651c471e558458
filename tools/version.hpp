// `cohort --version` / `cohort version`: what this program is (its
// version and the commit it was built from) and which GPU plugins it finds.
#pragma once

#include <string>

namespace cohort::tools {

/// The version of this build ("0.1.0"), from meson's project().
const char* version();

/// The commit this build was made from: `git describe` of the source tree
/// at build time, 12 hex digits, "-dirty" with uncommitted changes;
/// "unknown" when it was not built from a git checkout.
const char* build_commit();

/// The text `cohort --version` prints: "cohort VERSION (commit COMMIT)",
/// the compiler, then one line per GPU vendor: the plugin loaded and from
/// where, or why none was (the folders searched, a refused ABI).
std::string version_text();

} // namespace cohort::tools
