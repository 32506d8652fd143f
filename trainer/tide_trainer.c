/* tide trainer SDK for C (trainer/tide_trainer.h). Being written. */
#include "tide_trainer.h"
