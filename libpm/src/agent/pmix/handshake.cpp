#include "agent/pmix/handshake.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string_view>

namespace pm::agent::pmix {

namespace {

// PMIx's namespace field on the wire in the server's answer: PMIX_MAX_NSLEN + 1 bytes.
constexpr std::size_t nspace_bytes = 256;

// Reads fields off the payload, as the connection handler's PMIX_PTL_GET_* macros do.
class reader {
 public:
  explicit reader(std::span<const std::uint8_t> b) : b_(b) {}
  std::optional<std::string_view> string() {
    const void* nul = std::memchr(b_.data() + at_, 0, b_.size() - at_);
    if (nul == nullptr) return std::nullopt;
    const auto len =
        static_cast<std::size_t>(static_cast<const std::uint8_t*>(nul) - b_.data()) - at_;
    std::string_view s(reinterpret_cast<const char*>(b_.data() + at_), len);
    at_ += len + 1;
    return s;
  }
  std::optional<std::uint32_t> u32() {
    if (b_.size() - at_ < 4) return std::nullopt;
    const std::uint32_t v = (std::uint32_t{b_[at_]} << 24) | (std::uint32_t{b_[at_ + 1]} << 16) |
                            (std::uint32_t{b_[at_ + 2]} << 8) | std::uint32_t{b_[at_ + 3]};
    at_ += 4;
    return v;
  }
  std::optional<std::uint8_t> u8() {
    if (b_.size() - at_ < 1) return std::nullopt;
    return b_[at_++];
  }
  bool skip(std::size_t n) {
    if (b_.size() - at_ < n) return false;
    at_ += n;
    return true;
  }

 private:
  std::span<const std::uint8_t> b_;
  std::size_t at_ = 0;
};

bool printable(std::string_view s) {
  for (const char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) return false;
  }
  return true;
}

handshake_check invalid(std::string why) {
  handshake_check c;
  c.result = handshake_check::verdict::invalid;
  c.why = std::move(why);
  return c;
}

}  // namespace

handshake_check check_handshake(std::span<const std::uint8_t> bytes) {
  handshake_check c;
  if (bytes.size() < handshake_header_size) {
    // Check what is there already: garbage is refused as soon as it shows.
    static constexpr std::uint8_t start[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    const std::size_t n = std::min<std::size_t>(bytes.size(), sizeof start);
    if (std::memcmp(bytes.data(), start, n) != 0) return invalid("not a PMIx connection header");
    return c;
  }
  std::int32_t pindex = 0;
  std::uint32_t tag = 0, nbytes = 0;
  std::memcpy(&pindex, bytes.data(), 4);
  std::memcpy(&tag, bytes.data() + 4, 4);
  std::memcpy(&nbytes, bytes.data() + 8, 4);
  if (pindex != -1 || tag != 0xffffffffu) return invalid("not a PMIx connection header");
  if (nbytes == 0 || nbytes > max_handshake_payload) {
    return invalid("a connection header announcing " + std::to_string(nbytes) + " bytes");
  }
  if (bytes.size() < handshake_header_size + nbytes) return c;  // more to come

  reader r(bytes.subspan(handshake_header_size, nbytes));
  const auto psec = r.string();
  if (!psec || psec->empty() || !printable(*psec)) return invalid("no security module name");
  const auto cred_len = r.u32();
  if (!cred_len || !r.skip(*cred_len)) return invalid("a credential longer than the message");
  const auto flag = r.u8();
  if (!flag || *flag > 9) return invalid("an unknown process type");
  bool need_id = false;
  bool named = false;
  switch (*flag) {
    case 0:
      named = true;
      break;
    case 1:
    case 2:
      break;
    case 3:
    case 6:
      need_id = true;
      break;
    default:  // 4, 5, 7, 8, 9: a uid and gid, then a name
      named = true;
      break;
  }
  if (*flag != 0 && (!r.u32() || !r.u32())) return invalid("no uid and gid");
  if (named) {
    const auto ns = r.string();
    if (!ns || ns->size() >= nspace_bytes || !printable(*ns) || !r.u32()) {
      return invalid("no valid process name");
    }
  }
  const auto version = r.string();
  if (!version || version->empty() || !printable(*version)) return invalid("no version");
  if (!version->starts_with("2.0.") && *version != "2.0") {
    const auto bfrops = r.string();
    if (!bfrops || !printable(*bfrops) || !r.u8()) return invalid("no buffer format");
    const auto gds = r.string();
    if (!gds || !printable(*gds)) return invalid("no data store name");
  }
  c.result = handshake_check::verdict::complete;
  c.size = handshake_header_size + nbytes;
  c.tool = *flag != 0;
  c.reply_size = *flag == 0 ? 8 : 4 + (need_id ? nspace_bytes + 4 : 0) + nspace_bytes + 4 + 4;
  return c;
}

}  // namespace pm::agent::pmix
