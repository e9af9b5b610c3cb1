#pragma once
// kiln::data: datasets, the DataLoader and image transforms (opt-in, not behind <kiln/kiln.hpp>: it brings
// threads).
#include "kiln/data/dataloader.hpp"
#include "kiln/data/dataset.hpp"
#include "kiln/data/transforms.hpp"
