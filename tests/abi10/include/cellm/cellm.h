/* cellm plugin ABI: everything a plugin author includes. */
#ifndef CELLM_CELLM_H
#define CELLM_CELLM_H
#include "cellm/plugin.h"
#include "cellm/tensor.h"
#include "cellm/graph.h"
#include "cellm/format.h"
#include "cellm/arch.h"
#include "cellm/backend.h"
#endif
