// The numerical meaning of every graph op (graph.h), one plain loop nest per op.
#pragma once

#include "plan.hpp"

namespace cellm::scalar {

// Runs node `index` of a plan whose earlier nodes have run; throws plugin::Failure on bad runtime data
// (token id, slot or block table entry out of range).
void run_node(Plan& plan, int32_t index);

}  // namespace cellm::scalar
