// Claiming a DVM's URI file (docs/dvm.md, "The DVM's life"). A start never overwrites a file that
// names a DVM still answering: that DVM would run on unseen. The check and the write were two
// steps, so two starts at once with the same --report-uri both passed the check and both wrote,
// and one DVM ran unrecorded. Here they are one: the file is created by link() (it fails when the
// file exists); an existing one is locked (flock), checked, and replaced by rename() only when it
// names no live DVM. Of two starts at once exactly one records its URI.
#pragma once

#include <functional>
#include <string>

namespace pmrun {

enum class uri_claim { written, taken };

/// Writes `text` (0600) to `path` unless the file there names a DVM that answers: `live(path)`
/// returns that DVM's URI (empty when none answers), then put in `holder`. Throws pm::error (one
/// line naming `option`) when the file cannot be written.
uri_claim claim_uri_file(const std::string& path, const std::string& text, const char* option,
                         const std::function<std::string(const std::string&)>& live,
                         std::string& holder);

}  // namespace pmrun
