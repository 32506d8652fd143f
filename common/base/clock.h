/* Clock readings for the shells (daemons, CLI). The scheduler core never calls these: it is handed `now`. */
#ifndef TIDE_CLOCK_H
#define TIDE_CLOCK_H

#include <stdint.h>

/* Monotonic milliseconds (CLOCK_MONOTONIC). */
int64_t tide_clock_mono_ms(void);
/* Unix epoch milliseconds (CLOCK_REALTIME). */
int64_t tide_clock_wall_ms(void);

#endif
