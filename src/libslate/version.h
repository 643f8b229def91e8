/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* The daemon<->client API version. Bump it when a request or reply changes incompatibly;
 * slate refuses to talk to a slated that speaks another one. */
#define SLATE_API_VERSION 1
#define SLATE_VERSION PACKAGE_VERSION
