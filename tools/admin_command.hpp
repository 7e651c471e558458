// `cohort admin`: the admin API's command-line client.
#pragma once

#include <string>
#include <vector>

namespace cohort::tools {

/// `cohort admin [--url URL] [--token-file FILE] COMMAND [ARGS]`; prints the
/// JSON answer. Returns 0 for a 2xx answer, 1 for a 4xx or 5xx answer or an
/// unreachable node, 2 for bad input.
int cmd_admin(const std::vector<std::string>& args);

} // namespace cohort::tools
