#include "control/data_store.hpp"

namespace pm::control {

std::optional<link::pmix_data_reply> data_store::try_answer(const link::pmix_lookup& request,
                                                            bool partial) const {
  link::pmix_data_reply reply;
  reply.id = request.id;
  for (const auto& key : request.keys) {
    const auto it = values_.find(key);
    if (it == values_.end()) {
      if (!partial) return std::nullopt;
      continue;
    }
    reply.values.push_back(link::published_entry{key, it->second.rank, it->second.bytes});
  }
  reply.status = reply.values.empty() ? link::data_status::not_found : link::data_status::ok;
  return reply;
}

std::vector<data_store::answer> data_store::publish(std::uint32_t host,
                                                    const link::pmix_publish& request) {
  std::vector<answer> out;
  link::pmix_data_reply own;
  own.id = request.id;
  for (const auto& v : request.values) {
    if (values_.contains(v.key)) {
      own.status = link::data_status::error;  // PMIx: PMIX_ERR_DUPLICATE_KEY; nothing kept
      out.push_back(answer{host, std::move(own)});
      return out;
    }
  }
  for (const auto& v : request.values) values_[v.key] = value{request.rank, v.value};
  out.push_back(answer{host, std::move(own)});
  for (auto it = held_.begin(); it != held_.end();) {
    if (auto reply = try_answer(it->second, false)) {
      out.push_back(answer{it->first.first, std::move(*reply)});
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

std::optional<data_store::answer> data_store::lookup(std::uint32_t host,
                                                     const link::pmix_lookup& request) {
  if (auto reply = try_answer(request, !request.wait)) return answer{host, std::move(*reply)};
  held_[{host, request.id}] = request;
  return std::nullopt;
}

data_store::answer data_store::unpublish(std::uint32_t host, const link::pmix_unpublish& request) {
  answer a{host, {}};
  a.reply.id = request.id;
  a.reply.status = link::data_status::not_found;
  if (request.keys.empty()) {
    // No keys: everything the caller published (as PMIx_Unpublish with NULL keys).
    const auto n =
        std::erase_if(values_, [&](const auto& v) { return v.second.rank == request.rank; });
    if (n > 0) a.reply.status = link::data_status::ok;
    return a;
  }
  for (const auto& key : request.keys) {
    const auto it = values_.find(key);
    if (it == values_.end() || it->second.rank != request.rank) continue;
    values_.erase(it);
    a.reply.status = link::data_status::ok;
  }
  return a;
}

std::optional<data_store::answer> data_store::expire(std::uint32_t host, std::uint64_t id) {
  const auto it = held_.find({host, id});
  if (it == held_.end()) return std::nullopt;
  answer a{host, {}};
  a.reply.id = id;
  a.reply.status = link::data_status::timeout;
  held_.erase(it);
  return a;
}

void data_store::host_lost(std::uint32_t host) {
  std::erase_if(held_, [&](const auto& entry) { return entry.first.first == host; });
}

}  // namespace pm::control
