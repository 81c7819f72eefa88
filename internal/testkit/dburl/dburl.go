// Package dburl rewrites a server URL for another database on the same
// server: the local driver and the test harness create databases and reach
// them this way. Not for production code, which is given its URL.
package dburl

import (
	"fmt"
	"net/url"
)

// ForDatabase returns the postgres:// URL serverURL pointing at database
// name on the same server, with the same user and options: how the local
// driver and the test harness reach the databases they create.
func ForDatabase(serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("DATABASE_URL must be a postgres:// URL")
	}
	u.Path = "/" + name
	return u.String(), nil
}
