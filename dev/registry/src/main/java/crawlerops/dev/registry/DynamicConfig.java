package crawlerops.dev.registry;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import java.util.List;
import javax.enterprise.context.ApplicationScoped;
import javax.enterprise.inject.Produces;

/**
 * The settings an operator may change while the registry runs: none. (The Quarkus extension that would list them is
 * left out of the build, see pom.xml.)
 */
@ApplicationScoped
public class DynamicConfig {
    @Produces
    @ApplicationScoped
    DynamicConfigPropertyList dynamicProperties() {
        return new DynamicConfigPropertyList(List.of());
    }
}
