/* The trainer protocol, worker side (trainer_proto.h). Being written. */
#include "trainer_proto.h"
