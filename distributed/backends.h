#pragma once
// The backends' constructors, for process_group.cpp: each file builds without the other's
// library, and a missing one is a stub that raises.
#include <chrono>
#include <memory>
#include <string>

#include "distributed/process_group.h"
#include "distributed/store.h"

namespace ember::distributed {

// Both join every rank through `store` and return once all have (or raise ember::Error).
std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store> store, int rank, int size,
                                              const std::string& master_addr,
                                              std::chrono::milliseconds timeout);
std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store> store, int rank, int size,
                                              std::chrono::milliseconds timeout);

}  // namespace ember::distributed
