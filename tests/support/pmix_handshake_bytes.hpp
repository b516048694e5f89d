// PMIx messages built as libpmix 4.2.2's construct_message builds them (a 16-byte header:
// pindex, tag, size; then the payload), and the handshake a rank or a tool sends first: for the
// tests of pmd's handshake check and of its relay.
#pragma once

#include <arpa/inet.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace pm::test {

struct message {
  std::vector<std::uint8_t> payload;
  void str(const std::string& s) {
    payload.insert(payload.end(), s.begin(), s.end());
    payload.push_back(0);
  }
  void u32(std::uint32_t v) {
    const std::uint32_t n = htonl(v);
    const auto* p = reinterpret_cast<const std::uint8_t*>(&n);
    payload.insert(payload.end(), p, p + 4);
  }
  void u8(std::uint8_t v) { payload.push_back(v); }
  std::vector<std::uint8_t> bytes(std::int32_t pindex = -1, std::uint32_t tag = 0xffffffffu) const {
    std::vector<std::uint8_t> out(16);
    const auto nbytes = static_cast<std::uint32_t>(payload.size());
    std::memcpy(out.data(), &pindex, 4);
    std::memcpy(out.data() + 4, &tag, 4);
    std::memcpy(out.data() + 8, &nbytes, 4);
    out.insert(out.end(), payload.begin(), payload.end());
    return out;
  }
};

// What a rank (flag 0) or a tool sends: psec "native", its credential (uid, gid), the flag, the
// flag's fields, version, bfrops, buffer type, gds and an info blob.
inline message handshake(std::uint8_t flag) {
  message m;
  m.str("native");
  m.u32(8);
  for (int i = 0; i < 8; ++i) m.u8(0);
  m.u8(flag);
  if (flag == 0) {
    m.str("pmrun.123.abc");
    m.u32(3);
  } else {
    m.u32(1000);
    m.u32(1000);
    if (flag != 3 && flag != 6 && flag != 1 && flag != 2) {
      m.str("mytool");
      m.u32(0);
    }
  }
  m.str("4.2.2rc2");
  m.str("v41");
  m.u8(2);
  m.str("hash");
  for (int i = 0; i < 40; ++i) m.u8(static_cast<std::uint8_t>(i));  // the packed info array
  return m;
}

}  // namespace pm::test
